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
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from .._extras import extra
from ..aio import AsyncLog, AsyncWriter
from ..chain import PendingEntry
from ..errors import ConflictError, S3LogError, SessionExists, SessionNotFound
from ..layout import Layout
from ..log import Log, Writer
from ..ops import Proc
from ..protocol import LogConfig, WriterState, commit, delete_session, list_session_ids_with_prefix, load
from ..reducer import EntriesReducer, replay
from . import IntegrationError, _log_from_url

__all__ = [
    "AllowedType", "AsyncS3LogSaver", "S3LogSaver", "SyncCallError", "UnsafePayloadError", "session_for",
    "strict_serializer", "thread_prefix",
]

with extra("langgraph"):
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

CHECKPOINT = "lg.checkpoint"
WRITES = "lg.writes"

#: A type the serializer may rebuild: the class itself, or ``(module, name)``.
AllowedType = tuple[str, str] | type

# The serialization formats JsonPlusSerializer writes without pickle_fallback. Any other
# tag in stored data was not written by a saver using it: "pickle" runs code by design,
# and "json" goes through langchain's constructor revival.
_PLAIN_TAGS = frozenset({"null", "bytes", "bytearray", "msgpack"})

T = TypeVar("T")


class UnsafePayloadError(S3LogError):
    """A stored checkpoint value is in a format the saver refuses to load, because
    loading it could import or run code (or it is not a serialized value at all)."""


class SyncCallError(S3LogError, asyncio.InvalidStateError):
    """A synchronous method of :class:`AsyncS3LogSaver` was called where it cannot
    block: on its event loop's own thread, or with no loop running."""


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def thread_prefix(thread_id: str) -> str:
    """The session-id prefix of every namespace of a thread."""
    return f"lg-{_digest(thread_id, 32)}-"


def session_for(thread_id: str, checkpoint_ns: str) -> str:
    """The s3log session holding (thread_id, checkpoint_ns)."""
    return thread_prefix(thread_id) + _digest("ns:" + checkpoint_ns, 16)


# ------------------------------------------------------------------- serialization


def _allowlist(allowed_types: Iterable[AllowedType]) -> builtins.list[tuple[str, str]]:
    if isinstance(allowed_types, (str, bytes)) or not isinstance(allowed_types, Iterable):
        raise IntegrationError(f"allowed_types must be a list of classes or (module, name) pairs, "
                               f"got {allowed_types!r}")
    out: builtins.list[tuple[str, str]] = []
    for item in allowed_types:
        if isinstance(item, type):
            # The serializer records obj.__class__.__module__ and __name__: match those.
            out.append((item.__module__, item.__name__))
        elif (isinstance(item, tuple) and len(item) == 2
              and all(isinstance(part, str) and part for part in item)):
            out.append((item[0], item[1]))
        else:
            raise IntegrationError(f"allowed_types: {item!r} is neither a class nor a (module, name) "
                                   f"pair of non-empty strings, e.g. ('myapp.models', 'Order')")
    return out


def strict_serializer(allowed_types: Iterable[AllowedType] = ()) -> JsonPlusSerializer:
    """LangGraph's ``JsonPlusSerializer`` in strict mode: on read it rebuilds only
    LangGraph's built-in safe types and ``allowed_types``; a value naming any other
    type or callable comes back as its stored argument data, and nothing is imported.

    This is the savers' default; use it to build your own (e.g. inside an
    ``EncryptedSerializer``).
    """
    allowed = _allowlist(allowed_types)
    # None means "the built-in safe types only" (the strict mode of the serializer).
    return JsonPlusSerializer(allowed_msgpack_modules=allowed or None)


def _refuse_permissive(serde: Any, where: str = "serializer") -> None:
    """Refuse a serializer that would import and call whatever stored data names."""
    if isinstance(serde, EncryptedSerializer):
        # EncryptedSerializer hands values without a cipher tag straight to its inner
        # serializer, so a planted plaintext value meets the inner one's rules.
        _refuse_permissive(serde.serde, "serializer inside the EncryptedSerializer")
    elif isinstance(serde, JsonPlusSerializer):
        # Read with a default that refuses, so a renamed attribute fails closed.
        if getattr(serde, "_allowed_msgpack_modules", True) is True:
            raise IntegrationError(
                f"the {where} is a JsonPlusSerializer in its permissive mode, which imports and calls "
                "any callable a stored checkpoint names; use strict_serializer([...]) or "
                "JsonPlusSerializer(allowed_msgpack_modules=[...] or None)")
        if getattr(serde, "pickle_fallback", True):
            raise IntegrationError(f"the {where} has pickle_fallback=True: unpickling stored data runs "
                                   "code; use strict_serializer([...])")


def _tag_allowed(serde: Any, tag: str) -> bool:
    if isinstance(serde, EncryptedSerializer):
        return _tag_allowed(serde.serde, tag.split("+", 1)[0])
    if isinstance(serde, JsonPlusSerializer):
        return tag in _PLAIN_TAGS
    return True  # a serializer of the caller's own: its formats are its business


# ------------------------------------------------------------------------ folding


@dataclass
class _Thread:
    """The folded state of one (thread, namespace) session."""

    thread_id: str = ""
    checkpoint_ns: str = ""
    order: builtins.list[str] = field(default_factory=builtins.list)
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    # checkpoint id -> (task_id, idx) -> (channel, typed value, task_path)
    writes: dict[str, dict[tuple[str, int], tuple[str, Any, str]]] = field(default_factory=dict)


def _fold(entries: Sequence[dict[str, Any]], meta: dict[str, Any]) -> _Thread:
    t = _Thread(meta.get("thread_id", ""), meta.get("checkpoint_ns", ""))
    for e in entries:
        data = e["data"]
        if e["kind"] == CHECKPOINT:
            if data["id"] not in t.checkpoints:
                t.order.append(data["id"])
            t.checkpoints[data["id"]] = data
        elif e["kind"] == WRITES:
            bucket = t.writes.setdefault(data["checkpoint_id"], {})
            for idx, channel, value in data["writes"]:
                key = (data["task_id"], idx)
                # Regular writes are idempotent (first wins); special channels overwrite.
                if idx < 0 or key not in bucket:
                    bucket[key] = (channel, value, data.get("task_path", ""))
    return t


def _list_prefix(config: RunnableConfig | None) -> str | None:
    """The session-id prefix to LIST for ``list(config)``; None when one session is named."""
    if config is None:
        return "lg-"
    conf = config["configurable"]
    return None if "checkpoint_ns" in conf else thread_prefix(conf["thread_id"])


# -------------------------------------------------------------- prune / delete_for_runs

Keep = Callable[[_Thread], "set[str] | None"]


def _kept_entries(history: Sequence[dict[str, Any]], drop: set[str]) -> builtins.list[dict[str, Any]]:
    """The checkpoint and writes entries of ``history`` whose checkpoint is not in ``drop``."""
    def checkpoint_of(e: dict[str, Any]) -> str | None:
        if e["kind"] == CHECKPOINT:
            return str(e["data"]["id"])
        return str(e["data"]["checkpoint_id"]) if e["kind"] == WRITES else None

    return [e for e in history if (cid := checkpoint_of(e)) is not None and cid not in drop]


def _rewrite(layout: Layout, cfg: LogConfig, sid: str, drop_of: Keep) -> Proc[bool]:
    """Rewrite a thread's session without the checkpoints ``drop_of`` names (and their writes).

    The head is replaced, with If-Match on the ETag read, by the head of a compacted
    chain (seq 0 up, the kept entries as they were): atomic against a concurrent writer
    (it meets 412 and the saver appends again on the new head; this raises
    ConflictError and is retried by the caller). The old segments are no longer
    referenced; the head's ``retired_at`` gives readers holding the old head gc's grace
    period to finish. Nothing kept: the session is deleted. Returns whether it changed.
    """
    data = yield from load(layout, sid)
    reducer = EntriesReducer()
    history = replay(reducer, data.entries)
    drop = drop_of(_fold(history, data.head.meta.get("langgraph", {})))
    if not drop:
        return False
    kept = _kept_entries(history, drop)
    if not kept:
        yield from delete_session(layout, sid)
        return True
    now = cfg.env.now_ms()
    # A new root chain at the same id (the saver finds threads by id); its own parent, if
    # it was a copy, is forgotten with the history the pruned checkpoints held.
    fresh = replace(data.head, seq=-1, hash=None, segments=(), levels=(), tail=(), parent=None,
                    ts_min=None, ts_max=None, retired_at=now)
    ws = WriterState(sid, fresh, data.etag, reducer.initial(), {})
    pending = [PendingEntry(e["kind"], e["ts"], e["data"]) for e in kept]
    yield from commit(layout, cfg, ws, pending, reducer, on_conflict="raise")
    return True


def _keep_latest(n: int) -> Keep:
    def drop(t: _Thread) -> set[str] | None:
        return set(sorted(t.order)[:-n]) if len(t.order) > n else None

    return drop


def _check_prune(strategy: str, keep: int) -> None:
    if strategy not in ("keep_latest", "delete"):
        raise IntegrationError(f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}")
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
        raise IntegrationError(f"prune keep must be a positive integer, not {keep!r}")


class _SaverBase(BaseCheckpointSaver[Any]):
    """What the sync and async savers share: serialization and the pure parts of each verb."""

    def __init__(self, *, serde: SerializerProtocol | None, allowed_types: Iterable[AllowedType] | None,
                 strict: bool) -> None:
        if serde is None:
            serde = strict_serializer(allowed_types or ())
        else:
            if allowed_types is not None:
                raise IntegrationError(
                    "allowed_types configures the default serializer; with serde=..., allow the types "
                    "in that serializer (strict_serializer([...]) builds one)")
            _refuse_permissive(serde)
        super().__init__(serde=serde)
        self.strict = strict

    def _loads(self, stored: Any, what: str, t: _Thread) -> Any:
        where = f"{what} in thread {t.thread_id!r} (namespace {t.checkpoint_ns!r})"
        if not (isinstance(stored, (builtins.list, tuple)) and len(stored) == 2
                and isinstance(stored[0], str) and isinstance(stored[1], bytes)):
            raise UnsafePayloadError(f"{where} is not a (format, bytes) pair: refusing to load it")
        tag, body = stored
        if not _tag_allowed(self.serde, tag):
            raise UnsafePayloadError(
                f"{where} is stored in format {tag!r}, which this saver never writes and does not load "
                f"(it can run code); the stored session was written by something else")
        return self.serde.loads_typed((tag, body))

    def _tuple(self, t: _Thread, cid: str) -> CheckpointTuple:
        data = t.checkpoints[cid]
        config: RunnableConfig = {
            "configurable": {"thread_id": t.thread_id, "checkpoint_ns": t.checkpoint_ns, "checkpoint_id": cid}
        }
        parent = data.get("parent_id")
        parent_config: RunnableConfig | None = (
            {"configurable": {"thread_id": t.thread_id, "checkpoint_ns": t.checkpoint_ns, "checkpoint_id": parent}}
            if parent else None
        )
        pending = [
            (task_id, channel, self._loads(value, f"a pending write of checkpoint {cid}", t))
            for (task_id, _), (channel, value, _) in t.writes.get(cid, {}).items()
        ]
        return CheckpointTuple(
            config,
            self._loads(data["checkpoint"], f"checkpoint {cid}", t),
            self._loads(data["metadata"], f"the metadata of checkpoint {cid}", t),
            parent_config,
            pending,
        )

    def _pick(self, t: _Thread | None, config: RunnableConfig) -> CheckpointTuple | None:
        if t is None or not t.order:
            return None
        cid = get_checkpoint_id(config)
        if cid is None:
            cid = max(t.order)
        if cid not in t.checkpoints:
            return None
        return self._tuple(t, cid)

    def _select(
        self,
        threads: Iterable[_Thread],
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Iterator[CheckpointTuple]:
        before_id = get_checkpoint_id(before) if before else None
        found = sorted(((cid, t) for t in threads for cid in t.order), key=lambda x: x[0], reverse=True)
        n = 0
        for cid, t in found:
            if before_id is not None and cid >= before_id:
                continue
            tup = self._tuple(t, cid)
            if filter and any(tup.metadata.get(k) != v for k, v in filter.items()):
                continue
            yield tup
            n += 1
            if limit is not None and n >= limit:
                return

    def _checkpoint_entry(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> tuple[str, str, dict[str, Any], RunnableConfig]:
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        data = {
            "id": checkpoint["id"],
            "parent_id": conf.get("checkpoint_id"),
            "checkpoint": builtins.list(self.serde.dumps_typed(checkpoint)),
            "metadata": builtins.list(self.serde.dumps_typed(metadata)),
        }
        out: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                                "checkpoint_id": checkpoint["id"]}}
        return thread_id, ns, data, out

    def _writes_entry(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> tuple[str, str, dict[str, Any]]:
        conf = config["configurable"]
        return conf["thread_id"], conf.get("checkpoint_ns", ""), {
            "checkpoint_id": conf["checkpoint_id"],
            "task_id": task_id,
            "task_path": task_path,
            "writes": [
                [WRITES_IDX_MAP.get(channel, i), channel, builtins.list(self.serde.dumps_typed(value))]
                for i, (channel, value) in enumerate(writes)
            ],
        }

    def _runs_keep(self, run_ids: set[str]) -> Keep:
        """The checkpoints of a thread whose metadata names one of ``run_ids``."""
        def drop(t: _Thread) -> set[str] | None:
            out = {cid for cid, data in t.checkpoints.items()
                   if self._loads(data["metadata"], f"the metadata of checkpoint {cid}", t).get("run_id") in run_ids}
            return out or None

        return drop

    @staticmethod
    def _fork_meta(meta: dict[str, Any], target_thread_id: str) -> tuple[str, dict[str, Any]]:
        ns = meta.get("langgraph", {}).get("checkpoint_ns", "")
        return ns, {**meta, "langgraph": {"thread_id": target_thread_id, "checkpoint_ns": ns}}


# --------------------------------------------------------------------- sync saver


class S3LogSaver(_SaverBase):
    """A LangGraph ``BaseCheckpointSaver`` persisting to an s3log :class:`~s3log.Log`.

    ``allowed_types`` names the classes of your own (besides LangGraph's safe types)
    that stored checkpoints may rebuild: classes or ``(module, name)`` pairs. ``serde``
    replaces the serializer (a permissive ``JsonPlusSerializer`` is refused).
    ``strict=True`` raises :class:`~s3log.ConflictError` when another writer advanced a
    thread's session between this saver's read and write (exposing two runs on one
    thread); by default the saver re-reads the head and appends again.

    The async methods run the sync ones in a worker thread; for native asyncio use
    :class:`AsyncS3LogSaver`.
    """

    def __init__(
        self,
        log: Log,
        *,
        serde: SerializerProtocol | None = None,
        allowed_types: Iterable[AllowedType] | None = None,
        strict: bool = False,
    ) -> None:
        if isinstance(log, AsyncLog):
            raise IntegrationError("S3LogSaver needs a synchronous s3log.Log; for an s3log.AsyncLog use "
                                   "AsyncS3LogSaver")
        if not isinstance(log, Log):
            raise IntegrationError(f"S3LogSaver needs an s3log.Log, got {type(log).__name__}")
        super().__init__(serde=serde, allowed_types=allowed_types, strict=strict)
        self.log = log
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._writers: dict[str, Writer] = {}

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        serde: SerializerProtocol | None = None,
        allowed_types: Iterable[AllowedType] | None = None,
        strict: bool = False,
    ) -> Iterator[S3LogSaver]:
        """A saver on ``s3://bucket/prefix?endpoint=...&region=...``, closed on exit."""
        log = _log_from_url(conn_string)
        try:
            yield cls(log, serde=serde, allowed_types=allowed_types, strict=strict)
        finally:
            log.close()

    def setup(self) -> None:
        """Nothing to set up: sessions are created on first write (kept for LangGraph's convention)."""

    # ------------------------------------------------------------------ internals

    def _lock(self, sid: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(sid, threading.Lock())

    def _forget(self, sid: str) -> None:
        with self._lock(sid):
            self._writers.pop(sid, None)

    def _read(self, sid: str) -> _Thread | None:
        try:
            view = self.log.read(sid)
        except SessionNotFound:
            return None
        state = view.state(EntriesReducer())
        return _fold(state, view.meta.get("langgraph", {}))

    def _sessions(self, prefix: str) -> builtins.list[str]:
        return self.log.run(list_session_ids_with_prefix(self.log.layout, prefix))

    def _writer(self, sid: str, thread_id: str, ns: str) -> Writer:
        if sid not in self._writers:
            try:
                self._writers[sid] = self.log.open(sid, on_conflict="raise")
            except SessionNotFound:
                self._writers[sid] = self.log.create(
                    sid, meta={"langgraph": {"thread_id": thread_id, "checkpoint_ns": ns}},
                    lazy=True, on_conflict="raise",
                )
        return self._writers[sid]

    def _append(self, thread_id: str, ns: str, kind: str, data: dict[str, Any]) -> None:
        sid = session_for(thread_id, ns)
        with self._lock(sid):
            while True:
                writer = self._writer(sid, thread_id, ns)
                writer.append(kind, data)
                try:
                    writer.commit()
                    return
                except ConflictError as err:
                    # Another writer advanced the thread: re-read its head and append
                    # again (unless the entry landed after all), or expose it.
                    del self._writers[sid]
                    if err.landed:
                        return
                    if self.strict:
                        raise
                except (SessionExists, SessionNotFound):
                    del self._writers[sid]  # created or deleted by someone else meanwhile

    # --------------------------------------------------------------------- sync API

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by the config, or the thread's latest."""
        conf = config["configurable"]
        return self._pick(self._read(session_for(conf["thread_id"], conf.get("checkpoint_ns", ""))), config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first; ``filter`` on metadata, then ``before``, then ``limit``."""
        prefix = _list_prefix(config)
        if prefix is None:
            assert config is not None
            conf = config["configurable"]
            sids = [session_for(conf["thread_id"], conf["checkpoint_ns"])]
        else:
            sids = self._sessions(prefix)
        threads = [t for t in map(self._read, sids) if t is not None]
        yield from self._select(threads, filter, before, limit)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append a checkpoint; its parent is the checkpoint id in ``config``."""
        thread_id, ns, data, out = self._checkpoint_entry(config, checkpoint, metadata)
        self._append(thread_id, ns, CHECKPOINT, data)
        return out

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append a task's pending writes (idempotent on checkpoint, task and index)."""
        thread_id, ns, data = self._writes_entry(config, writes, task_id, task_path)
        self._append(thread_id, ns, WRITES, data)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every namespace's session of the thread."""
        for sid in self._sessions(thread_prefix(thread_id)):
            self._forget(sid)
            with contextlib.suppress(SessionNotFound):  # deleted by someone else meanwhile
                self.log.delete(sid)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Fork each namespace's session of the source thread into the target thread."""
        for sid in self._sessions(thread_prefix(source_thread_id)):
            ns, child_meta = self._fork_meta(self.log.head(sid).meta, target_thread_id)
            self.log.fork(sid, meta=child_meta, child_id=session_for(target_thread_id, ns))

    def _compact(self, sid: str, drop_of: Keep) -> None:
        with self._lock(sid):
            self._writers.pop(sid, None)  # its view of the head is about to be stale
            for attempt in range(self.log.config.retry.attempts):
                try:
                    self.log.run(_rewrite(self.log.layout, self.log.config, sid, drop_of))
                    return
                except SessionNotFound:
                    return  # deleted meanwhile: nothing to prune
                except ConflictError:
                    if attempt + 1 >= self.log.config.retry.attempts:
                        raise  # the thread keeps moving: say so rather than loop

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1) -> None:
        """Keep only the latest ``keep`` checkpoints per namespace (and their writes), or delete.

        Each namespace's session is rewritten into a compacted chain at the same id
        (one If-Match PUT of its head, plus a segment if big); the old segments are
        collected by ``gc`` after its grace period. ``strategy="delete"`` deletes the threads.
        """
        _check_prune(strategy, keep)
        for tid in thread_ids:
            if strategy == "delete":
                self.delete_thread(tid)
                continue
            for sid in self._sessions(thread_prefix(tid)):
                self._compact(sid, _keep_latest(keep))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id`` is one of ``run_ids``.

        Run ids are in each checkpoint's metadata only: every thread's session is read.
        """
        wanted = set(run_ids)
        if not wanted:
            return
        for sid in self._sessions("lg-"):
            self._compact(sid, self._runs_keep(wanted))

    # -------------------------------------------------------------------- async API
    # boto3 blocks: the async methods run the sync ones in a worker thread.

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`."""
        items = await asyncio.to_thread(
            lambda: builtins.list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async :meth:`put`."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async :meth:`put_writes`."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread`."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1) -> None:
        """Async :meth:`prune`."""
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy, keep=keep))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)


# -------------------------------------------------------------------- async saver


class AsyncS3LogSaver(_SaverBase):
    """A LangGraph ``BaseCheckpointSaver`` on an s3log :class:`~s3log.AsyncLog`: the
    ``a*`` methods await the log directly (no worker threads).

    Options as for :class:`S3LogSaver`. As with LangGraph's own async savers, the sync
    methods work only from a thread other than the event loop's, while that loop runs
    (they submit to it and wait); elsewhere they raise :class:`SyncCallError`. Use
    ``ainvoke`` / ``aget_state`` from async code.
    """

    def __init__(
        self,
        log: AsyncLog,
        *,
        serde: SerializerProtocol | None = None,
        allowed_types: Iterable[AllowedType] | None = None,
        strict: bool = False,
    ) -> None:
        if isinstance(log, Log):
            raise IntegrationError("AsyncS3LogSaver needs an s3log.AsyncLog; for an s3log.Log use S3LogSaver")
        if not isinstance(log, AsyncLog):
            raise IntegrationError(f"AsyncS3LogSaver needs an s3log.AsyncLog, got {type(log).__name__}")
        super().__init__(serde=serde, allowed_types=allowed_types, strict=strict)
        self.log = log
        self._locks: dict[str, asyncio.Lock] = {}
        self._writers: dict[str, AsyncWriter] = {}
        # The loop the sync methods submit to: the one running now, else the one the
        # async methods last ran on.
        self.loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self.loop = asyncio.get_running_loop()

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        serde: SerializerProtocol | None = None,
        allowed_types: Iterable[AllowedType] | None = None,
        strict: bool = False,
    ) -> AsyncIterator[AsyncS3LogSaver]:
        """A saver on ``s3://bucket/prefix?endpoint=...&region=...``; its client is closed on exit."""
        log = _log_from_url(conn_string, async_=True)
        try:
            yield cls(log, serde=serde, allowed_types=allowed_types, strict=strict)
        finally:
            aclose = getattr(log.store, "aclose", None)
            if aclose is not None:
                await aclose()

    async def setup(self) -> None:
        """Nothing to set up: sessions are created on first write (kept for LangGraph's convention)."""

    # ------------------------------------------------------------------ internals

    def _bind(self) -> None:
        self.loop = asyncio.get_running_loop()

    def _blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run an async method on the saver's loop from another thread, as LangGraph's
        async savers do; refuse where waiting would deadlock or never finish."""
        loop = self.loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or loop.is_closed() or not loop.is_running() or running is loop:
            coro.close()
            raise SyncCallError(
                "synchronous calls to AsyncS3LogSaver only work from another thread while its event loop "
                "runs; use the async interface (await saver.aget_tuple(...), await graph.ainvoke(...), "
                "await graph.aget_state(...)) or S3LogSaver for sync code")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def _lock(self, sid: str) -> asyncio.Lock:
        return self._locks.setdefault(sid, asyncio.Lock())

    async def _read(self, sid: str) -> _Thread | None:
        try:
            view = await self.log.read(sid)
        except SessionNotFound:
            return None
        state = view.state(EntriesReducer())
        return _fold(state, view.meta.get("langgraph", {}))

    async def _sessions(self, prefix: str) -> builtins.list[str]:
        return await self.log.run(list_session_ids_with_prefix(self.log.layout, prefix))

    async def _writer(self, sid: str, thread_id: str, ns: str) -> AsyncWriter:
        if sid not in self._writers:
            try:
                self._writers[sid] = await self.log.open(sid, on_conflict="raise")
            except SessionNotFound:
                self._writers[sid] = await self.log.create(
                    sid, meta={"langgraph": {"thread_id": thread_id, "checkpoint_ns": ns}},
                    lazy=True, on_conflict="raise",
                )
        return self._writers[sid]

    async def _append(self, thread_id: str, ns: str, kind: str, data: dict[str, Any]) -> None:
        sid = session_for(thread_id, ns)
        async with self._lock(sid):
            while True:
                writer = await self._writer(sid, thread_id, ns)
                writer.append(kind, data)
                try:
                    await writer.commit()
                    return
                except ConflictError as err:
                    # As in S3LogSaver._append: re-read and append again, or expose it.
                    del self._writers[sid]
                    if err.landed:
                        return
                    if self.strict:
                        raise
                except (SessionExists, SessionNotFound):
                    del self._writers[sid]

    # -------------------------------------------------------------------- async API

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by the config, or the thread's latest."""
        self._bind()
        conf = config["configurable"]
        return self._pick(await self._read(session_for(conf["thread_id"], conf.get("checkpoint_ns", ""))), config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints newest first; ``filter`` on metadata, then ``before``, then ``limit``."""
        self._bind()
        prefix = _list_prefix(config)
        if prefix is None:
            assert config is not None
            conf = config["configurable"]
            sids = [session_for(conf["thread_id"], conf["checkpoint_ns"])]
        else:
            sids = await self._sessions(prefix)
        threads = [t for t in await asyncio.gather(*map(self._read, sids)) if t is not None]
        for tup in self._select(threads, filter, before, limit):
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append a checkpoint; its parent is the checkpoint id in ``config``."""
        self._bind()
        thread_id, ns, data, out = self._checkpoint_entry(config, checkpoint, metadata)
        await self._append(thread_id, ns, CHECKPOINT, data)
        return out

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append a task's pending writes (idempotent on checkpoint, task and index)."""
        self._bind()
        thread_id, ns, data = self._writes_entry(config, writes, task_id, task_path)
        await self._append(thread_id, ns, WRITES, data)

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete every namespace's session of the thread."""
        self._bind()
        for sid in await self._sessions(thread_prefix(thread_id)):
            async with self._lock(sid):
                self._writers.pop(sid, None)
            with contextlib.suppress(SessionNotFound):  # deleted by someone else meanwhile
                await self.log.delete(sid)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Fork each namespace's session of the source thread into the target thread."""
        self._bind()
        for sid in await self._sessions(thread_prefix(source_thread_id)):
            ns, child_meta = self._fork_meta((await self.log.head(sid)).meta, target_thread_id)
            await self.log.fork(sid, meta=child_meta, child_id=session_for(target_thread_id, ns))

    async def _compact(self, sid: str, drop_of: Keep) -> None:
        async with self._lock(sid):
            self._writers.pop(sid, None)  # its view of the head is about to be stale
            for attempt in range(self.log.config.retry.attempts):
                try:
                    await self.log.run(_rewrite(self.log.layout, self.log.config, sid, drop_of))
                    return
                except SessionNotFound:
                    return  # deleted meanwhile: nothing to prune
                except ConflictError:
                    if attempt + 1 >= self.log.config.retry.attempts:
                        raise

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1) -> None:
        """Keep only the latest ``keep`` checkpoints per namespace, or delete (see :meth:`S3LogSaver.prune`)."""
        self._bind()
        _check_prune(strategy, keep)
        for tid in thread_ids:
            if strategy == "delete":
                await self.adelete_thread(tid)
                continue
            for sid in await self._sessions(thread_prefix(tid)):
                await self._compact(sid, _keep_latest(keep))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and writes) of these runs (see :meth:`S3LogSaver.delete_for_runs`)."""
        self._bind()
        wanted = set(run_ids)
        if not wanted:
            return
        for sid in await self._sessions("lg-"):
            await self._compact(sid, self._runs_keep(wanted))

    # --------------------------------------------------------------------- sync API

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Sync :meth:`aget_tuple` (from another thread than the saver's loop)."""
        return self._blocking(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Sync :meth:`alist` (from another thread than the saver's loop)."""

        async def collect() -> builtins.list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        return iter(self._blocking(collect()))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Sync :meth:`aput` (from another thread than the saver's loop)."""
        return self._blocking(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Sync :meth:`aput_writes` (from another thread than the saver's loop)."""
        self._blocking(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Sync :meth:`adelete_thread` (from another thread than the saver's loop)."""
        self._blocking(self.adelete_thread(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Sync :meth:`acopy_thread` (from another thread than the saver's loop)."""
        self._blocking(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1) -> None:
        """Sync :meth:`aprune` (from another thread than the saver's loop)."""
        self._blocking(self.aprune(thread_ids, strategy=strategy, keep=keep))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Sync :meth:`adelete_for_runs` (from another thread than the saver's loop)."""
        self._blocking(self.adelete_for_runs(run_ids))
