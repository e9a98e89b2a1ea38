"""The sans-IO core of the LangGraph savers, shared by the blocking and the asyncio shells.

Every decision lives here: which checkpoint a config names, what ``list`` returns,
what ``put`` and ``put_writes`` store and how they meet other writers, what ``prune``
and ``delete_for_runs`` drop and how a thread's session is rewritten without it
(the ids and the fold are :mod:`.threads`). Decisions are generator procedures that
yield calls of the log's and the writer's public verbs (``log.read``,
``log.append_latest``, ``log.compact``, ...: :class:`s3log._upper.Call`) and receive
what they return (an error is thrown back in);
:class:`~s3log.integrations.langgraph.S3LogSaver` performs them blocking
(:func:`s3log._upper.run`), :class:`~s3log.integrations.langgraph.AsyncS3LogSaver`
awaits them (:func:`s3log._upper.arun`). The verbs are written once, here, over the
shell's two runners; nothing else differs between the two savers.
"""

from __future__ import annotations

import builtins
import contextlib
from abc import abstractmethod
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from s3log._extras import extra
from s3log._format.values import Head
from s3log._upper import Call, Each, Locked, Proc, call
from s3log.aio import AsyncLog, AsyncWriter
from s3log.errors import ConflictError, SessionExists, SessionNotFound
from s3log.integrations import IntegrationError
from s3log.integrations._lease import RunLease, acquire, release
from s3log.integrations.langgraph.serde import (
    AllowedType,
    UnsafePayloadError,
    refuse_permissive,
    strict_serializer,
    tag_allowed,
)
from s3log.integrations.langgraph.threads import (
    CHECKPOINT,
    WRITES,
    Keep,
    ThreadState,
    check_prune,
    create_meta,
    delta_ancestors,
    entry_key,
    fold_view,
    fork_meta,
    head_info,
    keep_latest,
    selector,
    session_for,
    thread_prefix,
)
from s3log.log import Log, Writer
from s3log.results import CommitResult

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
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol

T = TypeVar("T")
L = TypeVar("L", bound="Log | AsyncLog")


def _list_prefix(config: RunnableConfig | None) -> str | None:
    """The session-id prefix to LIST for ``list(config)``; None when one session is named."""
    if config is None:
        return "lg-"
    conf = config["configurable"]
    return None if "checkpoint_ns" in conf else thread_prefix(conf["thread_id"])


# ------------------------------------------------------------------------ the saver


class SaverCore(BaseCheckpointSaver[Any], Generic[L]):
    """What the two savers share: every decision, and every verb written once.

    A shell supplies :meth:`_sync` and :meth:`_async`, which run a procedure against its
    log (blocking, or awaited), and :meth:`_check_log`, which refuses the other kind of log.
    """

    log: L

    def __init__(self, log: L, *, serde: SerializerProtocol | None = None,
                 allowed_types: Iterable[AllowedType] | None = None, strict: bool = False) -> None:
        self._check_log(log)
        if serde is None:
            serde = strict_serializer(allowed_types or ())
        else:
            if allowed_types is not None:
                raise IntegrationError(
                    "allowed_types configures the default serializer; with serde=..., allow the types "
                    "in that serializer (strict_serializer([...]) builds one)")
            refuse_permissive(serde)
        super().__init__(serde=serde)
        self.log = log
        self.strict = strict
        # What this saver knows of each session's head, to append without reading it
        # first: the last append's result, or (strict) the writer it opened. Shared with
        # the clones LangGraph makes (with_allowlist copies the saver shallowly).
        self._after: dict[str, CommitResult] = {}
        self._writers: dict[str, Writer[Any] | AsyncWriter[Any]] = {}
        # strict: the head this saver last read of a session it holds no writer for
        # (the next append's writer must open at it), and the checkpoints it refused
        # (their pending writes are refused too; a bounded, insertion-ordered set).
        self._read_at: dict[str, Head] = {}
        self._refused: dict[tuple[str, str], None] = {}
        # The shell sets up its in-process locks per session, for Locked (the blocking
        # shell: a threading.Lock per session id; the asyncio shell: per loop, per
        # session id).
        self._started()

    def _started(self) -> None:
        """Set up the shell's own state (called at the end of ``__init__``)."""

    @abstractmethod
    def _check_log(self, log: Any) -> None:
        """Raise IntegrationError unless ``log`` is the kind of log this shell drives."""

    @abstractmethod
    def _lock(self, sid: str) -> Any:
        """The shell's in-process lock on one session (a ``threading.Lock``, or the running
        loop's ``asyncio.Lock``), held by :class:`~s3log._upper.Locked`."""

    @staticmethod
    @abstractmethod
    def _pause(seconds: float) -> Any:
        """The shell's sleep (blocking, or awaitable), for a run lease's wait."""

    @abstractmethod
    def _sync(self, proc: Proc[T]) -> T:
        """Run a procedure, blocking."""

    @abstractmethod
    async def _async(self, proc: Proc[T]) -> T:
        """Run a procedure, awaited."""

    # ---------------------------------------------------------------- reading

    def _find(self, prefix: str) -> Call:
        """The session ids starting with ``prefix``, newest first."""
        return call(self.log.list_session_ids, prefix=prefix)

    def _read(self, ids: tuple[str, ...]) -> Each:
        """Read and verify sessions (the async shell reads them at once); None for a
        session that does not exist."""
        return Each(tuple(Call(self.log.read, (sid,), absent=(SessionNotFound,)) for sid in ids))


    def _loads(self, stored: Any, what: str, t: ThreadState) -> Any:
        where = f"{what} in thread {t.thread_id!r} (namespace {t.checkpoint_ns!r})"
        if not (isinstance(stored, (builtins.list, tuple)) and len(stored) == 2
                and isinstance(stored[0], str) and isinstance(stored[1], bytes)):
            raise UnsafePayloadError(f"{where} is not a (format, bytes) pair: refusing to load it")
        tag, body = stored
        if not tag_allowed(self.serde, tag):
            raise UnsafePayloadError(
                f"{where} is stored in format {tag!r}, which this saver never writes and does not load "
                f"(it can run code); the stored session was written by something else")
        return self.serde.loads_typed((tag, body))

    def _tuple(self, t: ThreadState, cid: str) -> CheckpointTuple:
        data = t.checkpoints[cid]
        config: RunnableConfig = {
            "configurable": {"thread_id": t.thread_id, "checkpoint_ns": t.checkpoint_ns, "checkpoint_id": cid}
        }
        parent = data.get("parent_id")
        parent_config: RunnableConfig | None = (
            {"configurable": {"thread_id": t.thread_id, "checkpoint_ns": t.checkpoint_ns, "checkpoint_id": parent}}
            if parent else None
        )
        # In ``writes_sort_key`` order (task path, task id, index), as upstream requires:
        # it is the order the run applied a super-step's writes in, and the order
        # ``get_delta_channel_history`` replays them in; arrival order is whichever
        # parallel task finished first.
        stored = t.writes.get(cid, {})
        ordered = sorted(stored.items(), key=lambda kv: writes_sort_key(kv[1][2], *kv[0]))
        pending = [
            (task_id, channel, self._loads(value, f"a pending write of checkpoint {cid}", t))
            for (task_id, _), (channel, value, _) in ordered
        ]
        return CheckpointTuple(
            config,
            self._loads(data["checkpoint"], f"checkpoint {cid}", t),
            self._loads(data["metadata"], f"the metadata of checkpoint {cid}", t),
            parent_config,
            pending,
        )

    def _get(self, config: RunnableConfig) -> Proc[CheckpointTuple | None]:
        conf = config["configurable"]
        sid = session_for(conf["thread_id"], conf.get("checkpoint_ns", ""))
        [view] = yield self._read((sid,))
        if self.strict and view is not None:
            yield Locked(self._lock(sid), self._note_read(sid, view.head))
        t = fold_view(view)
        if t is None or not t.order:
            return None
        cid = get_checkpoint_id(config)
        if cid is None:
            cid = max(t.order)
        if cid not in t.checkpoints:
            return None
        return self._tuple(t, cid)

    def _delta_history(self, config: RunnableConfig, channels: Sequence[str]) -> Proc[dict[str, Any]]:
        """``get_delta_channel_history`` from one read of the session: the default walks
        the parent chain with a ``get_tuple`` per ancestor, and each reads the whole
        session again (GETs growing with the square of a thread's length). Same walk,
        same answer: per channel, each ancestor's pending writes (``writes_sort_key``
        order), back to the nearest ancestor storing the channel's value (its seed)."""
        if not channels:
            return {}
        conf = config["configurable"]
        [view] = yield self._read((session_for(conf["thread_id"], conf.get("checkpoint_ns", "")),))
        t = fold_view(view)
        collected: dict[str, builtins.list[Any]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        cid = get_checkpoint_id(config)
        if t is not None and t.order:
            cid = max(t.order) if cid is None else cid
            target = t.checkpoints.get(cid)
            cursor = target.get("parent_id") if target is not None else None
            while cursor in t.checkpoints and remaining:
                tup = self._tuple(t, cursor)
                for write in reversed(tup.pending_writes or ()):
                    if write[1] in remaining:
                        collected[write[1]].append(write)
                values = tup.checkpoint["channel_values"]
                for ch in [ch for ch in remaining if ch in values]:
                    seeds[ch] = values[ch]
                    remaining.discard(ch)
                cursor = t.checkpoints[cursor].get("parent_id")
        out: dict[str, Any] = {}
        for ch in channels:
            entry: dict[str, Any] = {"writes": builtins.list(reversed(collected[ch]))}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            out[ch] = entry
        return out

    def _threads(self, config: RunnableConfig | None) -> Proc[builtins.list[ThreadState]]:
        prefix = _list_prefix(config)
        if prefix is None:
            assert config is not None
            conf = config["configurable"]
            sids = [session_for(conf["thread_id"], conf["checkpoint_ns"])]
        else:
            sids = yield self._find(prefix)
        views = yield self._read(tuple(sids))
        return [t for t in map(fold_view, views) if t is not None]

    def _select(
        self,
        config: RunnableConfig | None,
        threads: Iterable[ThreadState],
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Iterator[CheckpointTuple]:
        """``list``'s answer, lazily: newest first; the config's ``checkpoint_id`` (if any), ``filter``,
        then ``before``, then ``limit`` (none at all when ``limit <= 0``)."""
        if limit is not None and limit <= 0:
            return
        # A checkpoint id in the config names that checkpoint only (as upstream's savers do).
        only_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        found = sorted(((cid, t) for t in threads for cid in t.order), key=lambda x: x[0], reverse=True)
        n = 0
        for cid, t in found:
            if only_id is not None and cid != only_id:
                continue
            if before_id is not None and cid >= before_id:
                continue
            tup = self._tuple(t, cid)
            if filter and any(tup.metadata.get(k) != v for k, v in filter.items()):
                continue
            yield tup
            n += 1
            if limit is not None and n >= limit:
                return

    # ---------------------------------------------------------------- writing

    def _put(self, config: RunnableConfig, checkpoint: Checkpoint,
             metadata: CheckpointMetadata) -> Proc[RunnableConfig]:
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        yield from self._append(thread_id, ns, CHECKPOINT, {
            "id": checkpoint["id"],
            "parent_id": conf.get("checkpoint_id"),
            "checkpoint": builtins.list(self.serde.dumps_typed(checkpoint)),
            # With the config's metadata and plain configurable values merged in, as
            # upstream's savers store it (a run's ``run_id`` is how delete_for_runs finds it).
            "metadata": builtins.list(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
        })
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def _put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                    task_path: str) -> Proc[None]:
        conf = config["configurable"]
        yield from self._append(conf["thread_id"], conf.get("checkpoint_ns", ""), WRITES, {
            "checkpoint_id": conf["checkpoint_id"],
            "task_id": task_id,
            "task_path": task_path,
            "writes": [
                [WRITES_IDX_MAP.get(channel, i), channel, builtins.list(self.serde.dumps_typed(value))]
                for i, (channel, value) in enumerate(writes)
            ],
        })

    def _append(self, thread_id: str, ns: str, kind: str, data: dict[str, Any]) -> Proc[None]:
        # One append per session at a time in this process: parallel tasks of a graph
        # queue here instead of meeting each other as conflicts.
        sid = session_for(thread_id, ns)
        append = self._append_strict if self.strict else self._append_latest
        yield Locked(self._lock(sid), append(sid, create_meta(thread_id, ns), kind, data))

    def _append_latest(self, sid: str, meta: dict[str, Any], kind: str, data: dict[str, Any]) -> Proc[None]:
        """Append on top of whatever other writers did (``Log.append_latest`` re-reads the
        head on a conflict), starting from this saver's last result: one PUT when alone."""
        after = self._after.pop(sid, None)
        keys = (entry_key(kind, data),)
        try:
            result = yield call(self.log.append_latest, sid, ((kind, data),), create_meta=meta, after=after, keys=keys)
        except SessionNotFound:
            if after is None:
                raise
            # Deleted since this saver's last append (delete_thread elsewhere): start
            # the session afresh, as a first put does.
            result = yield call(self.log.append_latest, sid, ((kind, data),), create_meta=meta, keys=keys)
        self._after[sid] = result

    def _note_read(self, sid: str, head: Head) -> Proc[None]:
        """strict: this saver read the session at ``head``; its next append builds on that.

        The writer it holds stays when it is at that head (or past it: a commit of its
        own since the read); otherwise another writer advanced the session and this saver
        has now seen it: the writer goes, and the next append opens one that must be at
        ``head`` (a commit by anyone else between this read and that append is a conflict).
        """
        writer = self._writers.get(sid)
        if writer is not None:
            mine = writer.head
            if (mine.seq, mine.hash) == (head.seq, head.hash) or mine.seq > head.seq:
                return
            self._writers.pop(sid, None)
        self._read_at[sid] = head
        return
        yield  # a procedure with no operations: run under the session's lock

    def _append_strict(self, sid: str, meta: dict[str, Any], kind: str, data: dict[str, Any]) -> Proc[None]:
        """Append through the writer this saver holds, opened at the head it last read or
        wrote; another writer's commit since is a ConflictError (unless the entry landed
        after all), not something to build on. A refused checkpoint's writes are refused."""
        if kind == WRITES and (sid, data["checkpoint_id"]) in self._refused:
            raise self._refusal(sid, data["checkpoint_id"])
        try:
            yield from self._commit_strict(sid, meta, kind, data)
        except ConflictError:
            if kind == CHECKPOINT:
                self._refused[(sid, data["id"])] = None
                while len(self._refused) > 1024:
                    del self._refused[next(iter(self._refused))]
            raise

    def _commit_strict(self, sid: str, meta: dict[str, Any], kind: str, data: dict[str, Any]) -> Proc[None]:
        while True:
            writer = self._writers.get(sid)
            if writer is None:
                read_at = self._read_at.get(sid)
                try:
                    writer = yield call(self.log.open, sid, on_conflict="raise")
                except SessionNotFound:
                    writer = yield call(self.log.create, sid, meta=meta, lazy=True, on_conflict="raise")
                found = writer.head
                if read_at is not None and (found.seq, found.hash) != (read_at.seq, read_at.hash):
                    # Advanced (or deleted) by another writer since this saver read it; the
                    # read stays the base (every append conflicts) until the saver reads again.
                    raise ConflictError(sid, head_info(read_at), head_info(found))
                self._read_at.pop(sid, None)
                self._writers[sid] = writer
            try:
                writer.append(kind, data, key=entry_key(kind, data))
                yield call(writer.commit)
                return
            except ConflictError as err:
                self._writers.pop(sid, None)
                if err.landed:
                    return
                raise
            except (SessionExists, SessionNotFound):
                self._writers.pop(sid, None)  # created or deleted by someone else meanwhile: again
            except BaseException:
                # Its batch may still hold the entry (queued, or uncertain): a later commit
                # through it would store what this caller was told failed.
                self._writers.pop(sid, None)
                raise

    @staticmethod
    def _refusal(sid: str, cid: str) -> ConflictError:
        err = ConflictError(sid, {"checkpoint_id": cid}, None)
        err.args = (f"strict: checkpoint {cid} was refused on session {sid} (another writer advanced it "
                    f"since this saver read it), so its pending writes are not stored either",)
        return err

    def _forget(self, sid: str) -> None:
        """Drop what this saver knows of a session's head (it is about to be stale)."""
        self._after.pop(sid, None)
        self._writers.pop(sid, None)
        self._read_at.pop(sid, None)

    # ------------------------------------------------------- threads, pruning

    def _delete_thread(self, thread_id: str) -> Proc[None]:
        for sid in (yield self._find(thread_prefix(thread_id))):
            yield Locked(self._lock(sid), self._delete_session(sid))

    def _delete_session(self, sid: str) -> Proc[None]:
        self._forget(sid)
        with contextlib.suppress(SessionNotFound):  # deleted by someone else meanwhile
            yield call(self.log.delete, sid)

    def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> Proc[None]:
        source = thread_prefix(source_thread_id, what="source_thread_id")
        thread_prefix(target_thread_id, what="target_thread_id")
        forks: builtins.list[tuple[str, dict[str, Any], str]] = []
        for sid in (yield self._find(source)):
            head: Head = yield call(self.log.head, sid)
            ns, child_meta = fork_meta(head.meta, target_thread_id)
            forks.append((sid, child_meta, session_for(target_thread_id, ns)))
        # Every target namespace is checked before any is forked: a target that already
        # holds one of them is refused whole, not copied in part. (A namespace created in
        # the target meanwhile still makes its fork raise SessionExists.)
        for _, _, child in forks:
            try:
                yield call(self.log.head, child)
            except SessionNotFound:
                continue  # free (an expired id's tombstone is taken over by the fork)
            raise SessionExists(child)
        for sid, child_meta, child in forks:
            yield call(self.log.fork, sid, meta=child_meta, child_id=child)

    def _prune(self, thread_ids: Sequence[str], strategy: str, keep: int) -> Proc[None]:
        check_prune(strategy, keep)
        for tid in thread_ids:
            thread_prefix(tid, what="a thread id in thread_ids")  # all checked before any is pruned
        for tid in thread_ids:
            if strategy == "delete":
                yield from self._delete_thread(tid)
                continue
            for sid in (yield self._find(thread_prefix(tid))):
                yield Locked(self._lock(sid), self._compact(sid, keep_latest(keep)))

    def _delete_for_runs(self, run_ids: Sequence[str]) -> Proc[None]:
        wanted = set(run_ids)
        if not wanted:
            return
        for sid in (yield self._find("lg-")):
            yield Locked(self._lock(sid), self._compact(sid, self._runs_drop(wanted)))

    def _runs_drop(self, run_ids: set[str]) -> Keep:
        """The checkpoints of a thread whose metadata names one of ``run_ids``."""
        def drop(t: ThreadState) -> set[str] | None:
            out = {cid for cid, data in t.checkpoints.items()
                   if self._loads(data["metadata"], f"the metadata of checkpoint {cid}", t).get("run_id") in run_ids}
            return out or None

        return drop

    def _delta_safe(self, drop_of: Keep) -> Keep:
        """``drop_of`` less every checkpoint a surviving checkpoint's ``DeltaChannel`` state
        is rebuilt from (see :meth:`_delta_ancestors`): dropping those (and their writes)
        would silently rebuild the survivor's delta channels as empty."""
        def drop(t: ThreadState) -> set[str] | None:
            out = drop_of(t)
            if not out:
                return None
            out -= delta_ancestors(t, [cid for cid in t.order if cid not in out], self._loads)
            return out or None

        return drop

    def _compact(self, sid: str, drop_of: Keep) -> Proc[None]:
        self._forget(sid)
        drop_of = self._delta_safe(drop_of)
        attempts = self.log.config.retry.attempts
        for attempt in range(attempts):
            try:
                yield call(self.log.compact, sid, selector(drop_of))
                return
            except SessionNotFound:
                return  # deleted meanwhile: nothing to prune
            except ConflictError:
                if attempt + 1 >= attempts:
                    raise  # the thread keeps moving: say so rather than loop

    # ------------------------------------------------------------- run leases

    def _run_lease(self, config: RunnableConfig, owner: str | None, ttl: float,
                   wait: float) -> tuple[RunLease, dict[str, Any]]:
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        return RunLease(session_for(thread_id, ns), owner, ttl, wait), create_meta(thread_id, ns)

    def _take(self, lease: RunLease, meta: dict[str, Any]) -> Proc[None]:
        # Not under the session's in-process lock: a wait would hold up this process's
        # other appends to the thread (a run of its own releasing the lease, say).
        yield from acquire(self.log, lease, meta, self._pause)
        self._forget(lease.session_id)  # the lease's PUT moved the head this saver knew

    def _give_back(self, lease: RunLease) -> Proc[None]:
        yield Locked(self._lock(lease.session_id), release(self.log, lease))
        self._forget(lease.session_id)

    @contextlib.contextmanager
    def lease(self, config: RunnableConfig, *, owner: str | None = None, ttl: float = 300.0,
              wait: float = 0.0) -> Iterator[RunLease]:
        """Hold the thread for one run: ``with saver.lease(cfg): app.invoke(inp, cfg)``.

        Opt-in guard against two runs of one thread at once (by default both are
        stored, as LangGraph's own savers store them, and one run's checkpoints end up
        off the thread's latest chain). Entering records a lease in the head of the
        config's thread and namespace (one conditional PUT), or raises
        :class:`~s3log.agent.SessionBusy` before anything is read or written when
        another owner's lease is live after waiting up to ``wait`` seconds for it to be
        released; leaving releases it. ``ttl`` (seconds) must cover the run; a process
        that dies holding the lease holds it until then.
        """
        held, meta = self._run_lease(config, owner, ttl, wait)
        self._sync(self._take(held, meta))
        try:
            yield held
        except BaseException:
            with contextlib.suppress(Exception):  # the run's error wins; the lease expires
                self._sync(self._give_back(held))
            raise
        self._sync(self._give_back(held))

    @contextlib.asynccontextmanager
    async def alease(self, config: RunnableConfig, *, owner: str | None = None,
                     ttl: float = 300.0, wait: float = 0.0) -> AsyncIterator[RunLease]:
        """Async :meth:`lease`: ``async with saver.alease(cfg): await app.ainvoke(inp, cfg)``."""
        held, meta = self._run_lease(config, owner, ttl, wait)
        await self._async(self._take(held, meta))
        try:
            yield held
        except BaseException:
            with contextlib.suppress(Exception):
                await self._async(self._give_back(held))
            raise
        await self._async(self._give_back(held))

    # ------------------------------------------------------------- sync verbs

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by the config, or the thread's latest."""
        return self._sync(self._get(config))

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        """Each ``DeltaChannel``'s writes along the parent chain and its seed (LangGraph's
        contract), from one read of the session instead of a ``get_tuple`` per ancestor."""
        return self._sync(self._delta_history(config, channels))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first; only the config's ``checkpoint_id`` if it names one; ``filter``
        on metadata, then ``before``, then ``limit`` (``limit <= 0``: none)."""
        yield from self._select(config, self._sync(self._threads(config)), filter, before, limit)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Append a checkpoint; its parent is the checkpoint id in ``config``."""
        return self._sync(self._put(config, checkpoint, metadata))

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Append a task's pending writes (idempotent on checkpoint, task and index)."""
        self._sync(self._put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every namespace's session of the thread."""
        self._sync(self._delete_thread(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Fork each namespace's session of the source thread into the target thread.

        Raises :class:`~s3log.SessionExists`, copying nothing, when the target thread
        already has one of the source's namespaces.
        """
        self._sync(self._copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1) -> None:
        """Keep only the latest ``keep`` checkpoints per namespace (and their writes), or delete.

        Each namespace's session is rewritten into a compacted chain at the same id
        (one If-Match PUT of its head, plus a segment if big); the old segments are
        collected by ``gc`` after its grace period. ``strategy="delete"`` deletes the threads.

        Ancestors a kept checkpoint's ``DeltaChannel`` state is rebuilt from (back to
        each channel's nearest snapshot) are kept too, with their writes.
        """
        self._sync(self._prune(thread_ids, strategy, keep))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id`` is one of ``run_ids``.

        Run ids are in each checkpoint's metadata only: every thread's session is read.
        A named run's checkpoints that a surviving checkpoint's ``DeltaChannel`` state is
        rebuilt from are kept, with their writes.
        """
        self._sync(self._delete_for_runs(run_ids))

    # ------------------------------------------------------------ async verbs

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        return await self._async(self._get(config))

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        """Async :meth:`get_delta_channel_history`."""
        return await self._async(self._delta_history(config, channels))

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`."""
        for tup in self._select(config, await self._async(self._threads(config)), filter, before, limit):
            yield tup

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        """Async :meth:`put`."""
        return await self._async(self._put(config, checkpoint, metadata))

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        """Async :meth:`put_writes`."""
        await self._async(self._put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        await self._async(self._delete_thread(thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread`."""
        await self._async(self._copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1) -> None:
        """Async :meth:`prune`."""
        await self._async(self._prune(thread_ids, strategy, keep))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`."""
        await self._async(self._delete_for_runs(run_ids))
