"""The sans-IO core of the LangGraph savers, shared by the blocking and the asyncio shells.

Every decision lives here: how a session folds into checkpoints, which checkpoint a
config names, what ``list`` returns, what ``put`` and ``put_writes`` store and how
they meet other writers, what ``prune`` and ``delete_for_runs`` drop and how a
thread's session is rewritten without it. Decisions are generator procedures that
yield small operations (:class:`Read`, :class:`AppendLatest`, ...) and receive their
results (an error is thrown back in); :class:`~s3log.integrations.langgraph.S3LogSaver`
performs them against a :class:`~s3log.Log`,
:class:`~s3log.integrations.langgraph.AsyncS3LogSaver` awaits them against an
:class:`~s3log.AsyncLog`. The verbs are written once, here, over the shell's two
runners; nothing else differs between the two savers.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from s3log._api.core import LogVerbs
from s3log._api.writer import WriterVerbs
from s3log._extras import extra
from s3log._format.cbor import dumps
from s3log._format.values import Head
from s3log._protocol.protocol import Selector
from s3log.aio import AsyncLog
from s3log.errors import ConflictError, SessionExists, SessionNotFound
from s3log.integrations import IntegrationError
from s3log.integrations.langgraph.serde import (
    AllowedType,
    UnsafePayloadError,
    refuse_permissive,
    strict_serializer,
    tag_allowed,
)
from s3log.log import Log
from s3log.reducer import EntriesReducer
from s3log.results import CommitResult, SessionView

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

CHECKPOINT = "lg.checkpoint"
WRITES = "lg.writes"

T = TypeVar("T")
L = TypeVar("L", bound=LogVerbs)


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def _text(value: Any, what: str) -> str:
    """``value`` if it is text that UTF-8 can encode (what ids are hashed from), else an
    IntegrationError naming ``what``, raised before anything is read or written."""
    if not isinstance(value, str):
        raise IntegrationError(f"{what} must be a string, not {type(value).__name__} ({value!r})")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise IntegrationError(f"{what} {value!r} is not valid Unicode text ({exc.reason} at "
                               f"position {exc.start})") from None
    return value


def thread_prefix(thread_id: str, *, what: str = "thread_id") -> str:
    """The session-id prefix of every namespace of a thread.

    A thread id that is not a string of valid Unicode raises
    :class:`~s3log.integrations.IntegrationError` naming ``what``.
    """
    return f"lg-{_digest(_text(thread_id, what), 32)}-"


def session_for(thread_id: str, checkpoint_ns: str) -> str:
    """The s3log session holding (thread_id, checkpoint_ns).

    Ids that are not strings of valid Unicode raise
    :class:`~s3log.integrations.IntegrationError` naming the argument.
    """
    return thread_prefix(thread_id) + _digest("ns:" + _text(checkpoint_ns, "checkpoint_ns"), 16)


def entry_key(kind: str, data: Any) -> str:
    """The append key of a saver's entry: a digest of its kind and data, so a put or
    put_writes retried with the same content (after a timeout, a crash, a lost reply)
    is stored once, and different content is never refused (upstream savers upsert)."""
    return "lg:" + hashlib.sha256(dumps([kind, data])).hexdigest()[:40]


def _create_meta(thread_id: str, ns: str) -> dict[str, Any]:
    return {"langgraph": {"thread_id": thread_id, "checkpoint_ns": ns}}


# ----------------------------------------------------------------------- operations


@dataclass(frozen=True, slots=True)
class FindIds:
    """The session ids starting with ``prefix`` (``Log.list_session_ids(prefix=...)``); result: a list, newest first."""

    prefix: str


@dataclass(frozen=True, slots=True)
class Read:
    """Read and verify sessions (``Log.read``; the async shell reads them in parallel);
    result: a list of SessionView, None where there is no such session, in order."""

    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReadHead:
    """One session's head (``Log.head``); result: the Head."""

    session_id: str


@dataclass(frozen=True, slots=True)
class AppendLatest:
    """Append entries at the session's end, creating it with ``create_meta`` if missing
    (``Log.append_latest``); result: the CommitResult (the next ``after``)."""

    session_id: str
    entries: tuple[tuple[str, Any], ...]
    create_meta: dict[str, Any]
    after: CommitResult | None
    #: The entries' append keys (:func:`entry_key`): a retried put is stored once.
    keys: tuple[str | None, ...] | None = None


@dataclass(frozen=True, slots=True)
class Open:
    """Open a stored session with ``on_conflict="raise"`` (``Log.open``); result: its writer."""

    session_id: str


@dataclass(frozen=True, slots=True)
class Create:
    """Start a session lazily with ``on_conflict="raise"`` (``Log.create``); result: its writer."""

    session_id: str
    meta: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Commit:
    """Queue one entry on a writer and commit it (``append`` + ``commit``); result: the CommitResult."""

    writer: WriterVerbs[Any]
    kind: str
    data: Any
    #: Its append key (:func:`entry_key`).
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Fork:
    """Fork a session's latest entry into ``child_id`` (``Log.fork``); result: the child's id."""

    session_id: str
    meta: dict[str, Any]
    child_id: str


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete a session (``Log.delete``); result: how many objects were removed."""

    session_id: str


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Rewrite a session without the checkpoints ``drop_of`` names (see :func:`rewrite`);
    result: whether it changed. Performed by :func:`perform_rewrite`."""

    session_id: str
    drop_of: Keep


@dataclass(frozen=True, slots=True)
class Locked:
    """Run ``proc`` holding the saver's in-process lock on one session (a
    ``threading.Lock`` or an ``asyncio.Lock``); result: what ``proc`` returns."""

    session_id: str
    proc: Proc[Any]


Op = FindIds | Read | ReadHead | AppendLatest | Open | Create | Commit | Fork | Delete | Rewrite | Locked
Proc = Generator[Op, Any, T]


class Stepper(Generic[T]):
    """Drives a procedure for a shell, which only performs the operations::

        s = Stepper(proc)
        while (op := s.next()) is not None:
            try:
                s.ok(perform(op))          # or: s.ok(await perform(op))
            except Exception as exc:       # thrown back into the procedure, which decides
                s.fail(exc)
        return s.result()
    """

    def __init__(self, proc: Proc[T]) -> None:
        self._proc = proc
        self._value: Any = None
        self._error: BaseException | None = None
        self._result: T | None = None

    def next(self) -> Op | None:
        """The next operation to perform, or None when the procedure has returned."""
        value, error = self._value, self._error
        self._value, self._error = None, None
        try:
            # The last operation's error is thrown in at the yield that asked for it.
            return self._proc.throw(error) if error is not None else self._proc.send(value)
        except StopIteration as stop:
            self._result = stop.value
            return None

    def ok(self, value: Any) -> None:
        """The operation returned ``value``."""
        self._value = value

    def fail(self, error: BaseException) -> None:
        """The operation raised ``error``."""
        self._error = error

    def result(self) -> T:
        """What the procedure returned."""
        return cast(T, self._result)


# ------------------------------------------------------------------------ folding


@dataclass
class ThreadState:
    """The folded state of one (thread, namespace) session."""

    thread_id: str = ""
    checkpoint_ns: str = ""
    order: builtins.list[str] = field(default_factory=builtins.list)
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    # checkpoint id -> (task_id, idx) -> (channel, typed value, task_path)
    writes: dict[str, dict[tuple[str, int], tuple[str, Any, str]]] = field(default_factory=dict)


def fold(entries: Sequence[dict[str, Any]], meta: dict[str, Any]) -> ThreadState:
    """The checkpoints and pending writes of a session's entries (as dicts)."""
    t = ThreadState(meta.get("thread_id", ""), meta.get("checkpoint_ns", ""))
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


def _fold_view(view: SessionView | None) -> ThreadState | None:
    if view is None:
        return None
    return fold(view.state(EntriesReducer()), view.meta.get("langgraph", {}))


def _list_prefix(config: RunnableConfig | None) -> str | None:
    """The session-id prefix to LIST for ``list(config)``; None when one session is named."""
    if config is None:
        return "lg-"
    conf = config["configurable"]
    return None if "checkpoint_ns" in conf else thread_prefix(conf["thread_id"])


# -------------------------------------------------------------- prune / delete_for_runs

Keep = Callable[[ThreadState], "set[str] | None"]


def _kept_entries(history: Sequence[dict[str, Any]], drop: set[str]) -> builtins.list[dict[str, Any]]:
    """The checkpoint and writes entries of ``history`` whose checkpoint is not in ``drop``."""
    def checkpoint_of(e: dict[str, Any]) -> str | None:
        if e["kind"] == CHECKPOINT:
            return str(e["data"]["id"])
        return str(e["data"]["checkpoint_id"]) if e["kind"] == WRITES else None

    return [e for e in history if (cid := checkpoint_of(e)) is not None and cid not in drop]


def _selector(drop_of: Keep) -> Selector:
    """What :meth:`s3log.Log.compact` keeps of a thread's session: every entry but the
    checkpoints ``drop_of`` names (and their writes); None when nothing is dropped."""

    def select(history: list[dict[str, Any]], head: Head) -> list[dict[str, Any]] | None:
        drop = drop_of(fold(history, head.meta.get("langgraph", {})))
        return _kept_entries(history, drop) if drop else None

    return select


def perform_rewrite(log: Log | AsyncLog, op: Rewrite) -> Any:
    """Perform :class:`Rewrite` on ``log`` (a Log: the result; an AsyncLog: an awaitable).

    A new root chain at the same id (the saver finds threads by id) holding what is
    kept; atomic against a concurrent writer (ConflictError, retried by the caller);
    the old segments reach gc through ``retired_at`` (see :meth:`s3log.Log.compact`).
    """
    return log.compact(op.session_id, _selector(op.drop_of))


def _keep_latest(n: int) -> Keep:
    def drop(t: ThreadState) -> set[str] | None:
        return set(sorted(t.order)[:-n]) if len(t.order) > n else None

    return drop


def _check_prune(strategy: str, keep: int) -> None:
    if strategy not in ("keep_latest", "delete"):
        raise IntegrationError(f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}")
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
        raise IntegrationError(f"prune keep must be a positive integer, not {keep!r}")


def _head_info(head: Head) -> dict[str, Any]:
    return {"version": head.version, "seq": head.seq, "hash": head.hash.hex() if head.hash else None}


def _fork_meta(meta: dict[str, Any], target_thread_id: str) -> tuple[str, dict[str, Any]]:
    ns = meta.get("langgraph", {}).get("checkpoint_ns", "")
    return ns, {**meta, "langgraph": {"thread_id": target_thread_id, "checkpoint_ns": ns}}


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
        self._writers: dict[str, WriterVerbs[Any]] = {}
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
    def _sync(self, proc: Proc[T]) -> T:
        """Run a procedure, blocking."""

    @abstractmethod
    async def _async(self, proc: Proc[T]) -> T:
        """Run a procedure, awaited."""

    # ---------------------------------------------------------------- reading

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
        [view] = yield Read((sid,))
        if self.strict and view is not None:
            yield Locked(sid, self._note_read(sid, view.head))
        t = _fold_view(view)
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
        [view] = yield Read((session_for(conf["thread_id"], conf.get("checkpoint_ns", "")),))
        t = _fold_view(view)
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
            sids = yield FindIds(prefix)
        views = yield Read(tuple(sids))
        return [t for t in map(_fold_view, views) if t is not None]

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
        yield Locked(sid, append(sid, _create_meta(thread_id, ns), kind, data))

    def _append_latest(self, sid: str, meta: dict[str, Any], kind: str, data: dict[str, Any]) -> Proc[None]:
        """Append on top of whatever other writers did (``Log.append_latest`` re-reads the
        head on a conflict), starting from this saver's last result: one PUT when alone."""
        after = self._after.pop(sid, None)
        keys = (entry_key(kind, data),)
        try:
            result = yield AppendLatest(sid, ((kind, data),), meta, after, keys)
        except SessionNotFound:
            if after is None:
                raise
            # Deleted since this saver's last append (delete_thread elsewhere): start
            # the session afresh, as a first put does.
            result = yield AppendLatest(sid, ((kind, data),), meta, None, keys)
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
                    writer = yield Open(sid)
                except SessionNotFound:
                    writer = yield Create(sid, meta)
                found = writer.head
                if read_at is not None and (found.seq, found.hash) != (read_at.seq, read_at.hash):
                    # Advanced (or deleted) by another writer since this saver read it; the
                    # read stays the base (every append conflicts) until the saver reads again.
                    raise ConflictError(sid, _head_info(read_at), _head_info(found))
                self._read_at.pop(sid, None)
                self._writers[sid] = writer
            try:
                yield Commit(writer, kind, data, entry_key(kind, data))
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
        for sid in (yield FindIds(thread_prefix(thread_id))):
            yield Locked(sid, self._delete_session(sid))

    def _delete_session(self, sid: str) -> Proc[None]:
        self._forget(sid)
        with contextlib.suppress(SessionNotFound):  # deleted by someone else meanwhile
            yield Delete(sid)

    def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> Proc[None]:
        source = thread_prefix(source_thread_id, what="source_thread_id")
        thread_prefix(target_thread_id, what="target_thread_id")
        forks: builtins.list[tuple[str, dict[str, Any], str]] = []
        for sid in (yield FindIds(source)):
            head: Head = yield ReadHead(sid)
            ns, child_meta = _fork_meta(head.meta, target_thread_id)
            forks.append((sid, child_meta, session_for(target_thread_id, ns)))
        # Every target namespace is checked before any is forked: a target that already
        # holds one of them is refused whole, not copied in part. (A namespace created in
        # the target meanwhile still makes its fork raise SessionExists.)
        for _, _, child in forks:
            try:
                yield ReadHead(child)
            except SessionNotFound:
                continue  # free (an expired id's tombstone is taken over by the fork)
            raise SessionExists(child)
        for sid, child_meta, child in forks:
            yield Fork(sid, child_meta, child)

    def _prune(self, thread_ids: Sequence[str], strategy: str, keep: int) -> Proc[None]:
        _check_prune(strategy, keep)
        for tid in thread_ids:
            thread_prefix(tid, what="a thread id in thread_ids")  # all checked before any is pruned
        for tid in thread_ids:
            if strategy == "delete":
                yield from self._delete_thread(tid)
                continue
            for sid in (yield FindIds(thread_prefix(tid))):
                yield Locked(sid, self._compact(sid, _keep_latest(keep)))

    def _delete_for_runs(self, run_ids: Sequence[str]) -> Proc[None]:
        wanted = set(run_ids)
        if not wanted:
            return
        for sid in (yield FindIds("lg-")):
            yield Locked(sid, self._compact(sid, self._runs_drop(wanted)))

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
            out -= self._delta_ancestors(t, [cid for cid in t.order if cid not in out])
            return out or None

        return drop

    def _delta_ancestors(self, t: ThreadState, survivors: Iterable[str]) -> set[str]:
        """The ancestors LangGraph's ``get_delta_channel_history`` walks from ``survivors``.

        A ``DeltaChannel`` stores its value only every ``snapshot_frequency`` steps; in
        between, a checkpoint holds nothing for it and its value is rebuilt by walking the
        parent chain, replaying each ancestor's pending writes, back to the nearest
        ancestor whose ``channel_values`` has the channel (its snapshot). The channels to
        walk for are those the checkpoint's metadata counts since their last snapshot
        (``counters_since_delta_snapshot``, present only on threads with delta channels)
        that have a version and no stored value there, as LangGraph decides at load.
        """
        loaded: dict[str, tuple[set[str], set[str]]] = {}

        def stored_and_wanted(cid: str) -> tuple[set[str], set[str]]:
            # (channels with a stored value, delta channels rebuilt by the walk), per checkpoint.
            if cid not in loaded:
                data = t.checkpoints[cid]
                checkpoint = self._loads(data["checkpoint"], f"checkpoint {cid}", t)
                metadata = self._loads(data["metadata"], f"the metadata of checkpoint {cid}", t)
                stored = set(checkpoint.get("channel_values") or ())
                versions = checkpoint.get("channel_versions") or {}
                counters = (metadata or {}).get("counters_since_delta_snapshot") or {}
                loaded[cid] = stored, {k for k in counters if k in versions and k not in stored}
            return loaded[cid]

        needed: set[str] = set()
        carried: dict[str, set[str]] = {}  # ancestor -> channels already walked through it
        for cid in survivors:
            want = set(stored_and_wanted(cid)[1])
            parent = t.checkpoints[cid].get("parent_id")
            while want and parent in t.checkpoints:
                seen = carried.setdefault(parent, set())
                if want <= seen:
                    break  # walked from here for these channels already
                seen |= want
                needed.add(parent)
                want -= stored_and_wanted(parent)[0]
                parent = t.checkpoints[parent].get("parent_id")
        return needed

    def _compact(self, sid: str, drop_of: Keep) -> Proc[None]:
        self._forget(sid)
        drop_of = self._delta_safe(drop_of)
        attempts = self.log.config.retry.attempts
        for attempt in range(attempts):
            try:
                yield Rewrite(sid, drop_of)
                return
            except SessionNotFound:
                return  # deleted meanwhile: nothing to prune
            except ConflictError:
                if attempt + 1 >= attempts:
                    raise  # the thread keeps moving: say so rather than loop

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
