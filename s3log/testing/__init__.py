"""What ships to users' tests.

``plugin`` (the pytest plugin, registered through the ``pytest11`` entry point),
``localserver`` (an embedded S3 on 127.0.0.1), ``faults`` (fault-injecting stores),
``sim`` (the deterministic simulator), ``history`` (the checker of the promise) and
``conformance`` (two writers on one thread or session: a race any LangGraph saver or
Agents SDK session can be run through).
"""
