"""A LangGraph checkpointer on s3log: ``S3LogSaver``.

One s3log session per (thread_id, checkpoint_ns). A checkpoint is an entry
(``lg.checkpoint``) carrying its id, its parent's id (from the config at put time), and
the checkpoint and metadata serialized with the saver's ``serde.dumps_typed``; pending
writes are ``lg.writes`` entries. Reads fold the chain; the latest checkpoint costs the
head and the segments the chain has, never a LIST of the thread's history.

Session ids are derived from hashes of the thread id and namespace (``lg-<thread>-<ns>``),
so thread ids with any characters work, and every namespace of a thread is one LIST
away for ``delete_thread``. ``delete_thread`` really deletes those sessions.
``copy_thread`` forks each namespace's session into the target thread. Needs the
``langgraph`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._extras import extra
from ..errors import ConflictError, SessionExists, SessionNotFound
from ..log import Log, Writer
from ..protocol import list_session_ids_with_prefix
from ..reducer import EntriesReducer

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

CHECKPOINT = "lg.checkpoint"
WRITES = "lg.writes"


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def thread_prefix(thread_id: str) -> str:
    """The session-id prefix of every namespace of a thread."""
    return f"lg-{_digest(thread_id, 32)}-"


def session_for(thread_id: str, checkpoint_ns: str) -> str:
    """The s3log session holding (thread_id, checkpoint_ns)."""
    return thread_prefix(thread_id) + _digest("ns:" + checkpoint_ns, 16)


@dataclass
class _Thread:
    """The folded state of one (thread, namespace) session."""

    thread_id: str = ""
    checkpoint_ns: str = ""
    order: list[str] = field(default_factory=list)
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


class S3LogSaver(BaseCheckpointSaver[Any]):
    """A LangGraph ``BaseCheckpointSaver`` persisting to s3log (sync and async).

    ``strict=True`` raises :class:`~s3log.ConflictError` when another writer advanced a
    thread's session between this saver's read and write (exposing two runs on one
    thread); by default the saver re-reads the head and appends again.
    """

    def __init__(self, log: Log, *, serde: Any = None, strict: bool = False) -> None:
        super().__init__(serde=serde)
        self.log = log
        self.strict = strict
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._writers: dict[str, Writer] = {}

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
            (task_id, channel, self.serde.loads_typed(tuple(value)))
            for (task_id, _), (channel, value, _) in t.writes.get(cid, {}).items()
        ]
        return CheckpointTuple(
            config,
            self.serde.loads_typed(tuple(data["checkpoint"])),
            self.serde.loads_typed(tuple(data["metadata"])),
            parent_config,
            pending,
        )

    # --------------------------------------------------------------------- sync API

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by the config, or the thread's latest."""
        conf = config["configurable"]
        t = self._read(session_for(conf["thread_id"], conf.get("checkpoint_ns", "")))
        if t is None or not t.order:
            return None
        cid = get_checkpoint_id(config)
        if cid is None:
            cid = max(t.order)
        if cid not in t.checkpoints:
            return None
        return self._tuple(t, cid)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first; ``filter`` on metadata, then ``before``, then ``limit``."""
        if config is None:
            sids = self.log.run(list_session_ids_with_prefix(self.log.layout, "lg-"))
        else:
            conf = config["configurable"]
            if "checkpoint_ns" in conf:
                sids = [session_for(conf["thread_id"], conf["checkpoint_ns"])]
            else:
                sids = self.log.run(list_session_ids_with_prefix(self.log.layout, thread_prefix(conf["thread_id"])))
        before_id = get_checkpoint_id(before) if before else None
        found: list[tuple[str, _Thread]] = []
        for sid in sids:
            t = self._read(sid)
            if t is not None:
                found.extend((cid, t) for cid in t.order)
        found.sort(key=lambda x: x[0], reverse=True)
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

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append a checkpoint; its parent is the checkpoint id in ``config``."""
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        self._append(thread_id, ns, CHECKPOINT, {
            "id": checkpoint["id"],
            "parent_id": conf.get("checkpoint_id"),
            "checkpoint": list(self.serde.dumps_typed(checkpoint)),
            "metadata": list(self.serde.dumps_typed(metadata)),
        })
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append a task's pending writes (idempotent on checkpoint, task and index)."""
        conf = config["configurable"]
        self._append(conf["thread_id"], conf.get("checkpoint_ns", ""), WRITES, {
            "checkpoint_id": conf["checkpoint_id"],
            "task_id": task_id,
            "task_path": task_path,
            "writes": [
                [WRITES_IDX_MAP.get(channel, i), channel, list(self.serde.dumps_typed(value))]
                for i, (channel, value) in enumerate(writes)
            ],
        })

    def delete_thread(self, thread_id: str) -> None:
        """Delete every namespace's session of the thread."""
        for sid in self.log.run(list_session_ids_with_prefix(self.log.layout, thread_prefix(thread_id))):
            self._forget(sid)
            with contextlib.suppress(SessionNotFound):  # deleted by someone else meanwhile
                self.log.delete(sid)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Fork each namespace's session of the source thread into the target thread."""
        for sid in self.log.run(list_session_ids_with_prefix(self.log.layout, thread_prefix(source_thread_id))):
            meta = self.log.head(sid).meta
            ns = meta.get("langgraph", {}).get("checkpoint_ns", "")
            child_meta = {**meta, "langgraph": {"thread_id": target_thread_id, "checkpoint_ns": ns}}
            self.log.fork(sid, meta=child_meta, child_id=session_for(target_thread_id, ns))

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
        items = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
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

