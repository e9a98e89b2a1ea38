"""Compaction, sans-IO: rewriting a session as a new root chain of what a selector keeps.

:func:`compact_session` writes the new chain at the same id and marks in its head the
end of the chain it replaced (``compacted``), so a writer whose commit may have landed
in the old chain can tell (:func:`landed_before_compaction`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from s3log._format.chain import PendingEntry, build_chain
from s3log._format.entries import check_kind, check_ts, normalize_data
from s3log._format.layout import Layout
from s3log._format.values import COMPACTED_FIELD, Entry, Head
from s3log._protocol.delete import delete_session
from s3log._protocol.ops import Proc
from s3log._protocol.read import load
from s3log._protocol.state import ChainPosition
from s3log._protocol.write import write_head
from s3log.config import LogConfig, Selector
from s3log.errors import ConflictError, InvalidArgumentError, InvalidEntryError, StoreError
from s3log.reducer import Reducer, replay

log = logging.getLogger("s3log")


#: The head field a compaction writes (:func:`compact_session`), ``COMPACTED_FIELD``
#: (defined in s3log._format.codec, as signing covers it): the end (``seq``, ``hash``) of the
#: chain it replaced, the hashes of its last entries (``tips``), ``n``, how many
#: compactions the session has had, and the marks of the ones before (``prev``). Kept by
#: every later commit. Readers ignore it; a writer settling a commit that may have landed
#: before the compaction decides from it (:func:`landed_before_compaction`).


#: How many of the replaced chain's last entries a compaction's mark names (by the
#: first ``_TIP`` bytes of their hashes): a writer whose entries landed there, built on
#: by fewer commits than that, can tell they did.
COMPACTION_WINDOW = 32
_TIP = 16


#: How many compactions' marks a head keeps (the newest with the older ones in its
#: ``prev``): a writer settles against the first compaction after the head it built on.
COMPACTION_MARKS = 4


def compactions(head: Head) -> int:
    """How many times the session of ``head`` was compacted (its ``compacted.n``; 0 if never)."""
    mark = head.extra.get(COMPACTED_FIELD)
    n = mark.get("n") if isinstance(mark, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def landed_before_compaction(layout: Layout, base: Head, found: Head, entries: Sequence[Entry]) -> int:
    """How many of ``entries`` (built on ``base``; a prefix of them may have landed) the
    chain that a compaction replaced by ``found`` held, from what it recorded of it.

    The mark of the first compaction after ``base`` (the head keeps the last
    :data:`COMPACTION_MARKS`) holds the replaced chain's end and the hashes of its last
    entries (:data:`COMPACTION_WINDOW`): the entries that landed are the longest prefix
    whose last is found there at its seq (a hash commits to every entry before it); none
    if the chain ended at ``base`` or held another entry right after it. Otherwise (our
    entries older than the window, or that mark no longer kept) it cannot be told, and
    the entries must not be written again: raises StoreError, leaving them uncertain.
    """
    newest = found.extra.get(COMPACTED_FIELD)
    older = newest.get("prev") if isinstance(newest, dict) else None
    marks = [newest, *(older if isinstance(older, list) else [])]
    # Its PUT named the head it built on: it could land only before the first compaction since.
    mark = next((m for m in marks if isinstance(m, dict) and m.get("n") == compactions(base) + 1), None)
    if mark is not None and entries:
        end, tips = mark.get("seq"), mark.get("tips")
        if (end, mark.get("hash")) == (base.seq, base.hash):
            return 0
        if isinstance(end, int) and isinstance(tips, list) and end > base.seq:
            first = end - len(tips) + 1

            def held(e: Entry) -> bool:
                return first <= e.seq <= end and tips[e.seq - first] == e.hash[:_TIP]

            landed = max((i + 1 for i, e in enumerate(entries) if held(e)), default=0)
            if landed or first <= entries[0].seq:
                return landed  # none: the entry after base in that chain was another's
    raise StoreError(f"session {base.session} was compacted after a commit of this writer may have landed, and "
                     "whether it did cannot be told: its entries are not written again (they stay uncertain; "
                     "read the session to see what it kept, and write through a new writer)",
                     key=layout.head(base.session))




def _kept_entries(session: str, kept: object) -> list[PendingEntry]:
    """The entries a compaction's selector kept, each checked as ``append`` checks one
    (:class:`InvalidEntryError` or :class:`InvalidArgumentError` naming what is wrong)."""
    if isinstance(kept, (str, bytes, Mapping)) or not isinstance(kept, Iterable):
        raise InvalidArgumentError("select", f"must return a list of entry maps or None, not {type(kept).__name__}",
                                   session=session)
    out: list[PendingEntry] = []
    for i, e in enumerate(kept):
        if not isinstance(e, Mapping) or "kind" not in e or "ts" not in e:
            raise InvalidArgumentError("select", f"item {i} of what it returned is not a map with 'kind' and 'ts' "
                                                 f"(and 'data'): {e!r:.200}", session=session)
        kind = e["kind"]
        try:
            check_kind(kind)
        except InvalidEntryError as exc:
            raise InvalidEntryError(kind, str(exc).split(": ", 1)[-1], session=session) from None
        ts = check_ts(kind, e["ts"], session=session)
        out.append(PendingEntry(kind, ts, normalize_data(kind, e.get("data"), session=session)))
    return out


def compact_session(layout: Layout, cfg: LogConfig, session: str, select: Selector,
                    reducer: Reducer[list[dict[str, Any]]] | None = None) -> Proc[bool]:
    """Rewrite a session, at the same id, as a new root chain of what ``select`` keeps.

    The head is replaced with If-Match on the ETag just read, so a concurrent commit
    wins and this raises ConflictError (try again). The old segments are no longer
    referenced; ``retired_at`` gives readers holding the old head gc's grace period.
    Nothing kept deletes the session. Returns whether anything changed. For retention
    (pruning a checkpointer's old states): the new chain does not verify against the
    old one, by design. ``reducer``: what folds the entries into the history the
    selector sees (default :class:`~s3log.reducer.EntriesReducer`; an encrypted
    session's opens them first).
    """
    from s3log.reducer import EntriesReducer

    data = yield from load(layout, session)
    reducer = reducer or EntriesReducer()
    history = replay(reducer, data.entries)
    kept = select(history, data.head)
    if kept is None:
        return False
    # What the selector returns is input, checked as append checks it, before anything
    # is written: an entry a reader refuses (a ts that is not an int, a kind that is not
    # text or is s3log's own) made the rewritten session unreadable, its old segments
    # retired for gc; a ts past MAX_TS made every scan skip it.
    pending = _kept_entries(session, kept)
    if not pending:
        # Only the head decided on: a concurrent commit wins here too (ConflictError).
        yield from delete_session(layout, session, cfg, etag=data.etag)
        return True
    now = cfg.env.now_ms()
    # A new chain: the append keys' seqs name entries of the old one (decision 0037).
    # Which chain end this replaces: a writer whose commit landed in it unacknowledged
    # (a lost reply) finds its entries there by that, not by hash (landed_before_compaction).
    tips = [e.hash[:_TIP] for e in data.entries[-COMPACTION_WINDOW:]]
    mark: dict[str, Any] = {"seq": data.head.seq, "hash": data.head.hash, "n": compactions(data.head) + 1,
                            "tips": tips}
    last = data.head.extra.get(COMPACTED_FIELD)
    if isinstance(last, dict):
        prev = last.get("prev")
        mark["prev"] = [{k: v for k, v in last.items() if k != "prev"},
                        *(prev if isinstance(prev, list) else [])][: COMPACTION_MARKS - 1]
    fresh = replace(data.head, seq=-1, hash=None, segments=(), levels=(), tail=(), parent=None,
                    ts_min=None, ts_max=None, retired_at=now, pending=None, append_keys=(),
                    extra={**data.head.extra, COMPACTED_FIELD: mark})
    ws = ChainPosition(session, fresh, data.etag, reducer.initial(), {})
    entries = build_chain(pending, after_seq=-1, after_hash=None)
    # Not commit(): its landed-prefix check would take a concurrent chain that merely
    # starts with the same entries for ours. Any other head is a conflict here.
    _, outcome, _ = yield from write_head(layout, cfg, ws, entries)
    if outcome.kind != "committed":
        found = dict(outcome.found[0].summary(), etag=outcome.found[1]) if outcome.found else None
        raise ConflictError(session, dict(data.head.summary(), etag=data.etag), found)
    return True
