"""The protocol, sans-IO: procedures that yield requests (``ops``) and decide on replies.

Each procedure is a generator that yields :mod:`s3log._protocol.ops` requests and
receives their results (or has the store's error thrown in). No clock, randomness,
threads or store client: the blocking and the asyncio drivers (``s3log._drive``) run
the same procedures, so the commit decision table, chain verification, merging and
forking are reviewed and tested in one place. One module per verb:

- ``state``: the values procedures pass between them (``ChainPosition``,
  ``CommitJournal``, ``LeasePlan``) and the tombstone of an expired session;
- ``read``: reading and verifying a head, a chain, a suffix, one entry;
- ``headplan``: the next head a commit writes (inline, or a merged segment);
- ``write``: what a head depends on, its conditional PUT, the writer's next position;
- ``commit``: ``CommitPlan`` and ``commit`` / ``renew`` / ``take_over``;
- ``fork``: forks, their markers, children, lineage;
- ``latest``: ``append_latest``, which never forks;
- ``append_keys``: the window of append keys a head remembers;
- ``delete``: deleting a session, its dry run, gc;
- ``compact``: compaction and the marks it leaves;
- ``probe``: the precondition probe;
- ``listing``, ``retention``, ``activity``: listings, expiry, the activity index;
- ``decide``: the decision table every reply goes through.
"""
