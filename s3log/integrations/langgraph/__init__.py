"""LangGraph checkpointers on s3log: ``S3LogSaver`` (over a Log) and ``AsyncS3LogSaver``
(over an AsyncLog).

One s3log session per (thread_id, checkpoint_ns). A checkpoint is an entry
(``lg.checkpoint``) carrying its id, its parent's id (from the config at put time), and
the checkpoint and metadata serialized with the saver's ``serde.dumps_typed``; pending
writes are ``lg.writes`` entries. Reads fold the chain; the latest checkpoint costs the
head and the segments the chain has, never a LIST of the thread's history.

Session ids are derived from hashes of the thread id and namespace (``lg-<thread>-<ns>``),
so thread ids with any characters work, and every namespace of a thread is one LIST
away for ``delete_thread``. ``delete_thread`` really deletes those sessions.
``copy_thread`` forks each namespace's session into the target thread.

Stored values are data, never code: by default the savers deserialize with LangGraph's
``JsonPlusSerializer`` in its strict mode, which rebuilds only LangGraph's own safe types
(messages, ``Send``, ``Command``, datetimes, ...) plus the types named in
``allowed_types``. A payload naming anything else comes back as its inert argument data;
one in a format the saver never writes (``pickle``, ``json``) is refused with
:class:`UnsafePayloadError`. Needs the ``langgraph`` extra.

Layout: :mod:`.core` holds every decision (sans-IO procedures of calls of the log's
public verbs) and the verbs, written once; :mod:`.threads` the session ids, append keys
and fold of a thread; :mod:`.sync` and :mod:`.aio` are the two shells that perform the
calls (through :mod:`s3log._upper`); :mod:`.serde` is what may be deserialized.
"""

from __future__ import annotations

from s3log.integrations.langgraph.aio import AsyncS3LogSaver, SyncCallError
from s3log.integrations.langgraph.serde import AllowedType, UnsafePayloadError, strict_serializer
from s3log.integrations.langgraph.sync import S3LogSaver
from s3log.integrations.langgraph.threads import session_for, thread_prefix

__all__ = [
    "AllowedType", "AsyncS3LogSaver", "S3LogSaver", "SyncCallError", "UnsafePayloadError", "session_for",
    "strict_serializer", "thread_prefix",
]
