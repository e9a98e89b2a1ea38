"""How a LangGraph thread lives in s3log sessions: the session ids of its namespaces,
the append keys of its entries, the fold of a session into checkpoints and pending
writes, and what ``prune`` and ``delete_for_runs`` keep of it.

Its own room: pure functions of ids and entries, no I/O and no saver state, which the
savers' core (:mod:`.core`) decides with.
"""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from s3log._format.cbor import dumps
from s3log._format.values import Head
from s3log.config import Selector
from s3log.integrations import IntegrationError
from s3log.reducer import EntriesReducer
from s3log.results import SessionView

CHECKPOINT = "lg.checkpoint"
WRITES = "lg.writes"


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


def create_meta(thread_id: str, ns: str) -> dict[str, Any]:
    """The header of a (thread, namespace) session."""
    return {"langgraph": {"thread_id": thread_id, "checkpoint_ns": ns}}



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


def fold_view(view: SessionView | None) -> ThreadState | None:
    """The folded state of a read session (None when there is none)."""
    if view is None:
        return None
    return fold(view.state(EntriesReducer()), view.meta.get("langgraph", {}))


# -------------------------------------------------------------- prune / delete_for_runs

Keep = Callable[[ThreadState], "set[str] | None"]


def kept_entries(history: Sequence[dict[str, Any]], drop: set[str]) -> builtins.list[dict[str, Any]]:
    """The checkpoint and writes entries of ``history`` whose checkpoint is not in ``drop``."""
    def checkpoint_of(e: dict[str, Any]) -> str | None:
        if e["kind"] == CHECKPOINT:
            return str(e["data"]["id"])
        return str(e["data"]["checkpoint_id"]) if e["kind"] == WRITES else None

    return [e for e in history if (cid := checkpoint_of(e)) is not None and cid not in drop]


def selector(drop_of: Keep) -> Selector:
    """What :meth:`s3log.Log.compact` keeps of a thread's session: every entry but the
    checkpoints ``drop_of`` names (and their writes); None when nothing is dropped."""

    def select(history: list[dict[str, Any]], head: Head) -> list[dict[str, Any]] | None:
        drop = drop_of(fold(history, head.meta.get("langgraph", {})))
        return kept_entries(history, drop) if drop else None

    return select


def keep_latest(n: int) -> Keep:
    """Drop all but the newest ``n`` checkpoints (``prune``'s ``keep_latest``)."""
    def drop(t: ThreadState) -> set[str] | None:
        return set(sorted(t.order)[:-n]) if len(t.order) > n else None

    return drop


def check_prune(strategy: str, keep: int) -> None:
    """Refuse a ``prune`` strategy or ``keep`` that is not one (IntegrationError)."""
    if strategy not in ("keep_latest", "delete"):
        raise IntegrationError(f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}")
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
        raise IntegrationError(f"prune keep must be a positive integer, not {keep!r}")


def head_info(head: Head) -> dict[str, Any]:
    """What a strict conflict says of a head: version, seq and hash."""
    return {"version": head.version, "seq": head.seq, "hash": head.hash.hex() if head.hash else None}


def fork_meta(meta: dict[str, Any], target_thread_id: str) -> tuple[str, dict[str, Any]]:
    """A namespace's header copied to ``target_thread_id``: its namespace and the new header."""
    ns = meta.get("langgraph", {}).get("checkpoint_ns", "")
    return ns, {**meta, "langgraph": {"thread_id": target_thread_id, "checkpoint_ns": ns}}


def delta_ancestors(
    t: ThreadState, survivors: Iterable[str], loads: Callable[[Any, str, ThreadState], Any]
) -> set[str]:
    """The ancestors LangGraph's ``get_delta_channel_history`` walks from ``survivors``
    (``loads``: the saver's, which deserializes a stored checkpoint or metadata).

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
            checkpoint = loads(data["checkpoint"], f"checkpoint {cid}", t)
            metadata = loads(data["metadata"], f"the metadata of checkpoint {cid}", t)
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
