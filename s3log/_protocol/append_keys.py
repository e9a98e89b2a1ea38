"""Append keys, sans-IO: the window of keys a head remembers, and the entries they name.

A keyed append (``PendingEntry.key``) whose key the head remembers is acknowledged as
the stored entry instead of written again (decision 0037). The window each head keeps
(:func:`key_window`), what a fork inherits of it (:func:`inherited_keys`), and the
lookups of the stored entry a key names live here, in one room, so the keyed-append
path can be read (and changed) in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from s3log._format.cbor import dumps
from s3log._format.chain import PendingEntry
from s3log._format.layout import Layout
from s3log._format.values import AppendKey, Entry, Head, append_digest
from s3log._protocol.ops import Proc
from s3log._protocol.read import entry_now, read_head_or_none
from s3log.config import LogConfig
from s3log.errors import AppendKeyReused
from s3log.results import AckedEntry, acked_in


def key_window(
    cfg: LogConfig, window: tuple[AppendKey, ...], entries: Sequence[Entry], sources: Sequence[PendingEntry],
) -> tuple[AppendKey, ...]:
    """The append keys a head remembers after ``entries`` (built from ``sources``, in
    order): ``window`` and the keys of these, the newest ``cfg.append_key_window``."""
    new = [AppendKey(p.key, e.seq, p.digest) for e, p in zip(entries, sources, strict=False) if p.key is not None]
    if not new and len(window) <= cfg.append_key_window:
        return window
    fresh = {a.key for a in new}
    out = (*(a for a in window if a.key not in fresh), *new)
    return out[max(0, len(out) - cfg.append_key_window):] if cfg.append_key_window else ()


def inherited_keys(session: str, window: tuple[AppendKey, ...], upto_seq: int) -> tuple[AppendKey, ...]:
    """What a fork of ``session`` at ``upto_seq`` remembers of its parent's append keys:
    those of entries up to there, each naming the session it is in."""
    return tuple(a if a.session is not None else replace(a, session=session)
                 for a in window if a.session is not None or a.seq <= upto_seq)


def find_append_key(head: Head, key: str) -> AppendKey | None:
    """The append key ``key`` as ``head`` remembers it, or None."""
    for a in reversed(head.append_keys):
        if a.key == key:
            return a
    return None


def stored_for_key(layout: Layout, head: Head, mark: AppendKey) -> Proc[AckedEntry | None]:
    """The stored entry an append key of ``head`` names (verified), or None if that
    entry is no longer there (its session compacted, expired or deleted since).

    From the tail when it holds it (no request); else read as
    :func:`~s3log._protocol.read.entry_now` reads (a segment gone since ``head`` was
    read is looked for through the session's current head).
    """
    session = mark.session or head.session
    entry: Entry | None = None
    if session == head.session and head.tail_first_seq <= mark.seq <= head.seq:
        entry = head.tail[mark.seq - head.tail_first_seq]
    else:
        at: Head | None = head
        if session != head.session:
            found = yield from read_head_or_none(layout, session)
            at = found[0] if found is not None else None
        if at is not None and not at.expired:
            entry = yield from entry_now(layout, at, mark.seq)
    if entry is None or append_digest(entry.kind, dumps(entry.data)) != mark.digest:
        return None
    return acked_in(session, [entry])[0]


def stored_by_key(layout: Layout, head: Head, pending: Sequence[PendingEntry]) -> Proc[dict[int, AckedEntry]]:
    """The entries of ``pending`` whose append key ``head`` remembers, by index: the
    stored entry each stands for. AppendKeyReused if one had other content."""
    out: dict[int, AckedEntry] = {}
    for i, p in enumerate(pending):
        mark = find_append_key(head, p.key) if p.key is not None else None
        if mark is None:
            continue
        if mark.digest != p.digest:
            raise AppendKeyReused(mark.key, head.session, "a different kind or data")
        stored = yield from stored_for_key(layout, head, mark)
        if stored is not None:  # (gone with a compaction or expiry: appended again)
            out[i] = stored
    return out
