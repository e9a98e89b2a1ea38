"""Building and verifying hash chains. Pure functions, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from s3log._format.codec import Segment
from s3log._format.columns import LinkedRun, RunColumns
from s3log._format.entries import make_entry
from s3log._format.layout import parse_segment_key
from s3log._format.values import FORK_KIND, Entry, Head, ParentRef, entry_hash
from s3log.errors import CorruptionError


@dataclass(frozen=True, slots=True)
class PendingEntry:
    """An appended entry not yet chained: its place in the chain is decided at commit."""

    kind: str
    ts: int
    data: Any
    #: The deterministic encoding of ``data`` when known (from normalizing it at
    #: append), so the commit splices it into the record instead of encoding it again.
    data_cbor: bytes = field(default=b"", compare=False, repr=False)
    #: The append's idempotency key, if it has one, and :func:`~s3log._format.values.append_digest`
    #: of its kind and data: the head that commits it remembers both (decision 0037).
    key: str | None = field(default=None, compare=False)
    digest: bytes = field(default=b"", compare=False, repr=False)


def build_chain(
    pending: Iterable[PendingEntry], *, after_seq: int, after_hash: bytes | None
) -> list[Entry]:
    """Chain ``pending`` after the entry (``after_seq``, ``after_hash``)."""
    out: list[Entry] = []
    seq, prev = after_seq + 1, after_hash
    for p in pending:
        e = make_entry(seq, prev, p.kind, p.ts, p.data, p.data_cbor)
        out.append(e)
        seq, prev = seq + 1, e.hash
    return out


class ChainVerifier:
    """Checks entries one object at a time, in chain order.

    Seq must be contiguous from 0, every ``prev`` must be the previous hash, every
    hash must recompute. The first mismatch raises :class:`CorruptionError` naming
    the object key and seq.
    """

    def __init__(self, session: str, *, start_seq: int = 0, start_hash: bytes | None = None) -> None:
        self.session = session
        self.next_seq = start_seq
        self.last_hash = start_hash

    def feed(self, key: str, entries: Sequence[Entry]) -> None:
        """Verify the next run of entries, stored under ``key``.

        An entry with a record (read from a v2 object, or made here) carries the
        SHA-256 of that record as its hash, so only the links are checked; an entry
        read from a v1 object is re-encoded to recompute its hash. A :class:`LinkedRun`
        (a v2 object's entries, their links checked as they were decoded) is checked
        where it joins the chain only: its first entry here, the rest by the decoder.
        """
        seq, last = self.next_seq, self.last_hash
        if type(entries) is LinkedRun and entries:
            first = entries[0]
            if first.seq == seq and first.prev == last:
                self.next_seq, self.last_hash = seq + len(entries), entries[-1].hash
                return
            # else: the loop below names the first entry that does not fit
        for e in entries:
            if e.seq != seq or e.prev != last:
                raise _link_error(key, e.seq, e.prev, seq, last)
            if not e.raw:
                try:
                    recomputed = entry_hash(e.seq, e.prev, e.kind, e.ts, e.data)
                except Exception as exc:  # cbor2 raises several types for what it cannot encode
                    # A v1 entry is hashed as encoded again; data decoded to a value the
                    # encoder cannot write back (a tag read as a Python object) cannot be
                    # checked: corrupt, not a crash (docs/format.md, "Version 1 hashes").
                    raise CorruptionError(key, f"entry data cannot be encoded again to check its hash: {exc}",
                                          seq=e.seq) from exc
                if recomputed != e.hash:
                    raise CorruptionError(
                        key, f"hash is {e.hash.hex()}, content hashes to {recomputed.hex()}", seq=e.seq
                    )
            seq, last = seq + 1, e.hash
        self.next_seq, self.last_hash = seq, last

    def feed_segment(self, key: str, segment: Segment) -> None:
        """Verify a segment: its session, its key (first seq, last hash) and entries."""
        last_hash = self._segment_key(key, segment.session, segment.entries[0].seq)
        self.feed(key, segment.entries)
        _check_last(key, last_hash, segment.entries[-1].hash, segment.entries[-1].seq)

    def feed_columns(self, key: str, session: str, run: RunColumns) -> None:
        """:meth:`feed_segment` for a v2 segment decoded as its columns
        (:func:`s3log._format.codec.decode_segment_columns`), linked within as it was decoded:
        the same checks where it joins the chain, with the same errors."""
        last_hash = self._segment_key(key, session, run.seq)
        self.feed_linked_columns(key, run)
        _check_last(key, last_hash, run.hashes[-1], self.next_seq - 1)

    def feed_linked_columns(self, key: str, run: RunColumns) -> None:
        """:meth:`feed` for a run read as its columns and linked within as it was
        decoded (a head's tail, :func:`s3log._format.columns.tail_run`): checked where it joins
        the chain, with the error :meth:`feed` gives."""
        seq, last = self.next_seq, self.last_hash
        if run.seq != seq or run.prev != last:
            raise _link_error(key, run.seq, run.prev, seq, last)
        self.next_seq, self.last_hash = seq + len(run.hashes), run.hashes[-1]

    def _segment_key(self, key: str, session: str, first: int) -> bytes:
        """Check a segment's session and that its key names its first seq; the last hash it names."""
        if session != self.session:
            raise CorruptionError(key, f"segment belongs to session {session}, expected {self.session}")
        parsed = parse_segment_key(key)
        if parsed is None:
            raise CorruptionError(key, "not a segment key")
        first_seq, last_hash = parsed
        if first != first_seq:
            raise CorruptionError(key, f"key says first seq {first_seq}, segment starts at {first}", seq=first)
        return last_hash

    def finish(self, head_key: str, head: Head) -> None:
        """Check the head names the last verified entry."""
        if head.seq != self.next_seq - 1 or head.hash != self.last_hash:
            raise CorruptionError(
                head_key,
                f"head names seq {head.seq} hash {_hex(head.hash)}, chain ends at seq "
                f"{self.next_seq - 1} hash {_hex(self.last_hash)}",
                seq=head.seq,
            )


def check_fork_origin(head_key: str, head: Head, first: Entry | None) -> None:
    """A fork's first entry must be ``s3log.fork`` carrying the head's parent pointer."""
    is_fork_entry = first is not None and first.seq == 0 and first.kind == FORK_KIND
    if head.parent is None:
        if is_fork_entry:
            raise CorruptionError(head_key, "first entry is a fork entry but the head has no parent", seq=0)
        return
    if first is None:
        raise CorruptionError(head_key, "head has a parent but the session has no fork entry")
    if not is_fork_entry:
        raise CorruptionError(head_key, f"head has a parent but entry 0 is {first.kind!r}", seq=0)
    data = first.data
    stored = data.get("parent") if isinstance(data, dict) else None
    if stored is None or ParentRef.from_map(stored, head_key) != head.parent:
        raise CorruptionError(head_key, "fork entry's parent differs from the head's parent", seq=0)


def fork_entry_data(parent: ParentRef, seed: Any) -> dict[str, Any]:
    """The data of an ``s3log.fork`` entry."""
    return {"parent": parent.to_map(), "seed": seed}


def _link_error(
    key: str, seq: int, prev: bytes | None, expected_seq: int, expected_prev: bytes | None
) -> CorruptionError:
    """What is wrong with an entry (``seq``, ``prev``) placed where ``expected_seq`` and a
    link to ``expected_prev`` belong."""
    if seq != expected_seq:
        return CorruptionError(key, f"expected seq {expected_seq}, found {seq}", seq=seq)
    # The hash of the entry before (or the chain's start) and this link disagree.
    return CorruptionError(key, f"prev is {_hex(prev)}, expected {_hex(expected_prev)}", seq=seq)


def _check_last(key: str, named: bytes, last_hash: bytes, last_seq: int) -> None:
    if last_hash != named:
        raise CorruptionError(key, "key names a different last hash than the segment's last entry", seq=last_seq)


def _hex(h: bytes | None) -> str:
    return h.hex() if h is not None else "null"
