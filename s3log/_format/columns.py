"""Verified runs of entries as columns, for readers that need no Entry objects.

:class:`RunColumns` is a v2 segment's (or head tail's) entries as the columns it
stores, verified as its entries would be; :class:`LinkedRun` a run of entries whose
links the decoder already checked, which may carry its columns; :class:`_LazyTail` a
head's tail kept as columns until its entries are first asked for; :func:`tail_run`
hands a head's tail to a columnar reader (s3log.analytics, ``read_runs``). Their own
room: what the decoders hand over, apart from how they decode it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from s3log._format.values import _NEW_ENTRY, Entry, Head


@dataclass(frozen=True, slots=True)
class RunColumns:
    """A v2 segment's entries as the columns it stores, verified as its entries would be.

    Made only by :func:`~s3log._format.codec.decode_segment_columns`, after the same checks as the entries
    :func:`~s3log._format.codec.decode_segment` makes (every record rebuilt and hashed, the hashes equal to
    the stored ones, so the run is linked; each data item exactly one CBOR item), and
    by the decoder of a v2 head's tail beside its entries (:attr:`LinkedRun.columns`). The
    seqs run from ``seq``; the first entry's prev is ``prev``, each other's the hash
    before it. ``data`` holds each entry's data item as stored (its deterministic CBOR
    encoding, the bytes its record was hashed over), ``values`` the same decoded. For a
    columnar reader (s3log.analytics): no Entry is made, no record sliced.
    """

    seq: int
    prev: bytes | None
    ts: list[int]
    kinds: list[str]
    data: list[bytes]
    hashes: list[bytes]
    values: list[Any]


class LinkedRun(tuple[Entry, ...]):
    """Entries decoded from one v2 object whose links the decoder has already checked.

    Made only by the v2 decoder, after checking that the seqs run without a gap, that
    every entry's ``prev`` is the hash of the entry before it and that every hash is
    the SHA-256 of the record it was read from. :class:`s3log._format.chain.ChainVerifier`
    then checks only where the run joins the chain (its first seq and ``prev``),
    instead of every entry again. An ordinary tuple otherwise.
    """

    # No __slots__ (a tuple subclass can have none but the empty ones): an instance
    # may carry its columns.

    #: The same entries as columns, when the decoder had them anyway (a head's tail read
    #: off its records): a columnar reader takes them instead of the entries' fields.
    #: None otherwise. Not to be modified.
    columns: RunColumns | None = None


class _LazyTail:
    """A v2 head's tail read off its records and verified, its entries not yet made.

    Making an :class:`Entry` costs ~0.3 µs, about a fourteenth of a scan's time per
    entry, and a columnar reader (a scan) never needs one. A decoded head holds this
    instead of its ``tail`` until the tail is first read (see :class:`Head`), and
    :func:`tail_run` hands the columns to such a reader (docs/decisions/0029).
    """

    __slots__ = ("columns", "records")

    def __init__(self, columns: RunColumns, records: list[bytes]) -> None:
        self.columns = columns
        self.records = records

    def entries(self) -> LinkedRun:
        """The entries (the checks were made when the columns were read)."""
        c = self.columns
        s0, n = c.seq, len(c.hashes)
        run = LinkedRun(map(_NEW_ENTRY, range(s0, s0 + n), [c.prev, *c.hashes[:-1]], c.kinds, c.ts, c.values,
                            c.hashes, self.records))
        run.columns = c
        return run


def tail_run(head: Head) -> tuple[Entry, ...] | RunColumns:
    """A head's tail for a columnar reader: its verified columns when the decoder kept
    them (no Entry is made), else its entries."""
    lazy: _LazyTail | None = getattr(head, "_lazy_tail", None)
    if lazy is not None:
        return lazy.columns
    tail = head.tail
    return tail.columns if type(tail) is LinkedRun and tail.columns is not None else tail
