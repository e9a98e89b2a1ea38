"""The Arrow side of a scan: the schemas, and entries made into columns.

:data:`SCHEMA` (one row per entry) and :data:`SESSIONS_SCHEMA` (one row per session,
from its head), the times they hold (:data:`TS_RANGE`), and the code that turns the runs
:meth:`s3log.Log.read_runs` gives into record batches with few Python objects per row:
``data_json`` in one orjson call, ``hash``/``prev`` as views of one hex text, ``date``
from each distinct day, ``session`` written once per session (:class:`_Columns`). Its
own room because it is where a scan's CPU goes, measured and tuned apart from how the
sessions are read (:mod:`s3log.analytics.reading`).
"""

from __future__ import annotations

import json
from array import array
from binascii import hexlify
from collections.abc import Callable, Iterable, Iterator
from itertools import compress, islice
from operator import attrgetter, ne
from typing import Any

from s3log._extras import extra
from s3log._format import jsonform
from s3log._format.columns import RunColumns
from s3log._format.entries import MAX_TS, data_cbor_column
from s3log._format.values import HASH_LEN, Head
from s3log.results import EntryRun

with extra("analytics"):
    import pyarrow as pa


_orjson: Any
try:  # optional: several times faster than the json module for data_json
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None


_TS = pa.timestamp("ms", tz="UTC")
_DAY_MS = 86_400_000

#: The schema of every batch :func:`~s3log.analytics.scan` yields. ``date`` is ``YYYY-MM-DD`` of ``ts`` (UTC).
SCHEMA = pa.schema([
    pa.field("session", pa.string(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("ts", _TS, nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("hash", pa.string(), nullable=False),
    pa.field("prev", pa.string()),
    pa.field("parent_session", pa.string()),
    pa.field("data_cbor", pa.binary(), nullable=False),
    pa.field("data_json", pa.string()),
    pa.field("date", pa.string(), nullable=False),
])

#: One row per session, from its head (no segment is read): join on ``session``.
SESSIONS_SCHEMA = pa.schema([
    pa.field("session", pa.string(), nullable=False),
    pa.field("created_at", _TS, nullable=False),
    pa.field("updated_at", _TS, nullable=False),
    pa.field("entries", pa.int64(), nullable=False),
    pa.field("ts_min", _TS),
    pa.field("ts_max", _TS),
    pa.field("parent", pa.string()),
    pa.field("parent_seq", pa.int64()),
    pa.field("fork_reason", pa.string()),
    pa.field("labels", pa.map_(pa.string(), pa.string())),
    pa.field("meta_json", pa.string()),
    pa.field("date", pa.string(), nullable=False),
])


# ------------------------------------------------------------------------------ values


#: The times, in ms since the epoch, a scan holds: from the epoch (no writer stores an
#: earlier ``ts``) to the last ms DuckDB's ``TIMESTAMPTZ`` (microseconds in 64 bits)
#: holds, 294247-01-10 UTC; Arrow's ``timestamp[ms]`` and ``date32`` hold all of it. A
#: session with an entry ``ts``, or a head time, outside it is a
#: :class:`~s3log.CorruptionError` to a scan (skipped with a
#: :class:`~s3log.analytics.CorruptSessionWarning` unless ``strict``). Python's ``datetime`` ends with
#: year 9999: read later times as ``ts.cast(pa.int64())``.
TS_RANGE = (0, MAX_TS)  # what append takes (s3log._format.entries.MAX_TS)


# One rule for JSON everywhere (data_json, the CLI's --json, query, the jsonl export).
_text = jsonform.text
_json_plain = jsonform.plain


def _json_std(value: Any) -> str | None:
    """:func:`_json` with the json module alone."""
    try:
        return json.dumps(_json_plain(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


if _orjson is not None:

    def _json(value: Any) -> str | None:
        """``data_json`` of one value: the JSON of :func:`_json_plain` (None only for a
        value nested too deep for the json module, or holding an integer too long for
        JSON text: over 4,300 digits)."""
        try:
            plain = _json_plain(value)
        except (RecursionError, ValueError):  # too deep; a value whose str() is refused
            return None
        try:
            text: str = _orjson.dumps(plain).decode()
            return text
        except TypeError:  # ints over 64 bits, nesting over 255: the json module copes
            return _json_std(value)
else:  # pragma: no cover - depends on the environment
    _json = _json_std


def _json_column(values: list[Any]) -> list[str | None]:
    """:func:`_json` of many values, in C calls to orjson's plain form when every value
    takes it (text keys, JSON types: then the same text), else value by value."""
    if _orjson is not None:
        try:
            # Each bytes object is decoded, and freed, before the next is made: keeping
            # them all first costs several times more (orjson allocates generously).
            out: list[str | None] = list(map(bytes.decode, map(_orjson.dumps, values)))
        except (TypeError, ValueError):  # integer keys, bytes, ints over 64 bits...
            pass
        else:
            return out
    return list(map(_json, values))


#: A raw NUL byte between rows: orjson writes it verbatim from a Fragment and never
#: otherwise (control characters in strings are escaped, nothing else can hold one).
_ROW_SEP = b",\x00,"
_fragment: Any = getattr(_orjson, "Fragment", None)
_SEP_ITEM: Any = _fragment(b"\x00") if _fragment is not None else None
#: From this many rows data_json is made in one orjson call: below, the two Arrow calls
#: that cut it cost more than the calls to orjson they save (measured: ~130 rows).
_JSON_ONE_CALL_ROWS = 128
#: Up to this size of a row's data (as CBOR): beyond, cutting the text costs more per
#: byte than orjson's cost per call saves (measured: ~3.5 KB of JSON).
_JSON_ONE_CALL_MAX_BYTES = 3072


def _json_array(values: list[Any], row_bytes: int = 0) -> pa.Array:
    """The ``data_json`` column: the texts of :func:`_json_column`, as a string array.

    orjson's own cost per call is most of its cost for small values, so the values go
    in one call, a separator item between each two, and Arrow cuts the text at the
    separators (one C++ call). Any value orjson's plain form refuses (then the whole
    list is refused), or a cut that does not give one piece per row, takes the value by
    value path instead: the same text either way. So do rows of over
    :data:`_JSON_ONE_CALL_MAX_BYTES` (``row_bytes``, a typical row's encoded data),
    for which the cut costs more than the calls saved.
    """
    n = len(values)
    if _SEP_ITEM is not None and n >= _JSON_ONE_CALL_ROWS and row_bytes <= _JSON_ONE_CALL_MAX_BYTES:
        items = [_SEP_ITEM] * (2 * n - 1)
        items[::2] = values
        try:
            text: bytes | None = _orjson.dumps(items)
        except (TypeError, ValueError):  # integer keys, bytes, ints over 64 bits, too deep...
            text = None
        if text is not None and len(text) < 2**31:
            import pyarrow.compute as pc  # loaded on first use, as Array.cast does

            # The text without its brackets, as one binary value (no copy).
            whole = pa.Array.from_buffers(
                pa.binary(), 1, [None, pa.py_buffer(array("i", [1, len(text) - 1])), pa.py_buffer(text)])
            rows = pc.split_pattern(whole, pattern=_ROW_SEP).flatten()
            if len(rows) == n:
                return rows.view(pa.string())  # orjson writes UTF-8 only
    return pa.array(_json_column(values), pa.string())


def _label(value: Any) -> str:
    if isinstance(value, str):
        return value
    text = _json(value)
    if text is None:
        try:
            text = _text(value)
        except ValueError:  # a value holding an integer too long for str()
            text = type(value).__name__
    return text


def _days_to_dates(days: pa.Array) -> pa.Array:
    # date32 -> string gives YYYY-MM-DD without formatting each row in Python.
    return days.cast(pa.date32()).cast(pa.string())


# ----------------------------------------------------------------------------- batches


def _owner_columns(owners: list[tuple[str, str | None, int]], n: int) -> tuple[pa.Array, pa.Array]:
    """The ``session`` and ``parent_session`` columns of ``n`` rows, from each session's
    (session, parent, rows): each value written once and taken for its rows, instead of
    one Python string per row converted one by one (a third of the cost)."""
    picks = array("i")
    for i, (_, _, rows) in enumerate(owners):
        picks += array("i", [i]) * rows
    index = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(picks)])
    sessions = pa.array([o[0] for o in owners], pa.string()).take(index)
    parent_names = [o[1] for o in owners]
    # No forks among them (most batches). Not any(): a stored parent named "" is a fork.
    if parent_names.count(None) == len(parent_names):
        return sessions, pa.nulls(n, pa.string())
    return sessions, pa.array(parent_names, pa.string()).take(index)


_SEQ, _TS_OF, _KIND_OF, _HASH_OF, _PREV_OF, _DATA_OF = (
    attrgetter(name) for name in ("seq", "ts", "kind", "hash", "prev", "data"))


def _hex_or_none(value: bytes | None) -> str | None:
    return None if value is None else value.hex()


#: int32 offsets 0, 64, 128...: the offsets of hex hashes laid end to end, shared by
#: every hash column (sliced, never copied); grown on demand up to _OFFSETS_CAP rows.
_offsets64 = pa.py_buffer(array("i", range(0, 64 * 4097, 64)))
_OFFSETS_CAP = 1 << 20


def _offsets(n: int) -> pa.Buffer:
    """A buffer of the ``n`` int32 offsets 0, 64, 128... (n - 1 strings of 64 bytes)."""
    global _offsets64
    have = _offsets64
    if have.size < 4 * n:
        if n > _OFFSETS_CAP:
            return pa.py_buffer(array("i", range(0, 64 * n, 64)))
        # A race between two scans only builds it twice.
        have = _offsets64 = pa.py_buffer(array("i", range(0, 64 * max(n, 2 * (have.size // 4)), 64)))
    return have.slice(0, 4 * n)


def _hash_columns(hashes: list[bytes], prevs: list[bytes | None]) -> tuple[pa.Array, pa.Array]:
    """The ``hash`` and ``prev`` columns (hex) of rows whose hashes are 32 bytes.

    Both columns are views of one hex text made in one call, no string object per row:
    the first row's prev then every hash, laid end to end. Within a session each prev
    is the hash of the row before, so the prev column is that text one row earlier
    than the hash column; only the rows where it is not (a session's first row, a row
    after rows a filter dropped) are looked at one by one: a null where there is no
    prev (over whatever the text holds there), else that prev written into a copy of
    the text. Anything else (a prev or hash of another length) takes one value at a time.
    """
    made = _hash_views(hashes, prevs) if 64 * (len(hashes) + 2) < 2**31 else None
    if made is None:
        return (pa.array(list(map(bytes.hex, hashes)), pa.string()),
                pa.array(list(map(_hex_or_none, prevs)), pa.string()))
    return made


def _hash_views(hashes: list[bytes], prevs: list[bytes | None]) -> tuple[pa.Array, pa.Array] | None:
    n = len(hashes)
    first = prevs[0] if n else None
    zero = bytes(HASH_LEN)
    joined = b"".join([zero if first is None else first, *hashes])
    # Every hash 32 bytes (and the first prev: then the text is 64 hex digits a row).
    if not n or len(joined) != HASH_LEN * (n + 1) or set(map(len, hashes)) != {HASH_LEN}:
        return None
    text = pa.py_buffer(hexlify(joined))
    hashed = pa.Array.from_buffers(pa.string(), n, [None, _offsets(n + 2).slice(4), text])
    # breaks[i]: whether row i + 1's prev differs from row i's hash. Compared in C
    # (the same object, in a chain read in one piece: no byte is compared).
    breaks = bytes(map(ne, islice(prevs, 1, None), hashes))
    if breaks.count(1) > n // _BREAKS_PER_ROW:
        # Most prevs are not the hash before (a kinds filter dropped the rows between):
        # looking at each in Python costs more than laying them all out as the hashes.
        if set(map(len, filter(None, prevs))) - {HASH_LEN}:
            return None
        nulls = [i for i, p in enumerate(prevs) if p is None]
        prev_text = pa.py_buffer(hexlify(b"".join([zero if p is None else p for p in prevs])))
    else:
        nulls = [0] if first is None else []
        patched: list[tuple[int, bytes]] = []
        i = breaks.find(1)
        while i >= 0:
            p = prevs[i + 1]
            if p is None:
                nulls.append(i + 1)
            elif len(p) != HASH_LEN:
                return None
            else:
                patched.append((i + 1, p))
            i = breaks.find(1, i + 1)
        prev_text = text
        if patched:
            copy = bytearray(text)
            for i, p in patched:
                copy[64 * i:64 * i + 64] = hexlify(p)
            prev_text = pa.py_buffer(copy)
    validity = None
    if nulls:
        bitmap = bytearray(b"\xff" * ((n + 7) // 8))
        for i in nulls:
            bitmap[i >> 3] &= ~(1 << (i & 7)) & 0xFF
        validity = pa.py_buffer(bitmap)
    prev = pa.Array.from_buffers(pa.string(), n, [validity, _offsets(n + 1), prev_text], null_count=len(nulls))
    return hashed, prev


#: Beyond one row in this many whose prev is not the hash before, the prevs are laid
#: out as their own text (measured: the two ways cost the same at about one in four).
_BREAKS_PER_ROW = 5


#: ms of the earliest and after the latest time whose day fits a date32.
_DATE32_MS = (-(2**31) * _DAY_MS, 2**31 * _DAY_MS)
#: The same times without a time zone: their cast to a day is a plain division.
_NAIVE_MS = pa.timestamp("ms")
#: From this many rows a batch's dates are made from its distinct days: below, the two
#: more Arrow calls cost more than they save (measured: ~350 rows).
_DAYS_BY_DICT_ROWS = 512


def _date_column(ts: pa.Array, tss: list[int]) -> pa.Array:
    """``YYYY-MM-DD`` (UTC) of each time (``ts``: timestamps, ``tss`` the same in ms)."""
    import pyarrow.compute as pc  # loaded on first use, as Array.cast does

    n = len(ts)
    if not n:
        return pa.array([], pa.string())
    ms = ts.view(pa.int64())
    # Each Arrow call costs microseconds whatever the rows: few rows take fewer calls.
    if n < _DAYS_BY_DICT_ROWS:
        lo, hi = min(tss), max(tss)
    else:
        bounds = pc.min_max(ms)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    if _DATE32_MS[0] <= lo and hi < _DATE32_MS[1]:
        # The day of each time: the cast floors (without a time zone it is a division,
        # with one several times slower).
        days = ms.view(_NAIVE_MS).cast(pa.date32())
        if n < _DAYS_BY_DICT_ROWS:
            return days.cast(pa.string())
        # The text of each distinct day, not of each row: a batch spans a few days.
        coded = days.dictionary_encode()
        return coded.dictionary.cast(pa.string()).take(coded.indices)
    # Days out of date32's range: refused by Arrow as before (no silent wrap).
    return _days_to_dates(pa.array([t // _DAY_MS for t in tss], pa.int32()))


#: Rows gathered as Python lists, across sessions, before they are made Arrow arrays:
#: Arrow's cost per call is paid once per this many rows, not once per session (a scan
#: of many short sessions spent most of its time there).
_GATHER_ROWS = 4096


class _Columns:
    """Entry rows accumulated column by column, cut into record batches of a fixed size."""

    def __init__(self) -> None:
        self.chunks: list[pa.RecordBatch] = []
        #: Rows held: in ``chunks`` and gathered below.
        self.rows = 0
        #: The bytes of entry data those rows hold (data_cbor; data_json is about as much).
        self.bytes = 0
        self._clear()

    def _clear(self) -> None:
        #: (session, parent session, rows) of each session's rows, in order.
        self.owners: list[tuple[str, str | None, int]] = []
        self.seqs: list[int] = []
        self.tss: list[int] = []
        self.kinds: list[str] = []
        self.hashes: list[bytes] = []
        self.prevs: list[bytes | None] = []
        self.data: list[bytes] = []
        self.values: list[Any] = []

    def add(self, head: Head, runs: Iterable[EntryRun], keep: Callable[[int, str], bool] | None = None) -> int:
        """Add a session's verified entries, given as the runs they were read in (see
        :meth:`s3log.Log.read_runs`), keeping only the rows ``keep(ts, kind)`` accepts."""
        seqs: list[int] = []
        tss: list[int] = []
        kinds: list[str] = []
        hashes: list[bytes] = []
        prevs: list[bytes | None] = []
        data: list[bytes] = []
        values: list[Any] = []
        for run in runs:
            if isinstance(run, RunColumns):
                # A v2 segment's own columns, verified by the decoder: its data bytes
                # are the data_cbor column, each prev is the hash before it.
                seqs += range(run.seq, run.seq + len(run.hashes))
                tss += run.ts
                kinds += run.kinds
                prevs.append(run.prev)
                prevs += run.hashes[:-1]
                hashes += run.hashes
                data += run.data
                values += run.values
            elif run:  # the tail, a v1 segment: from the entries (C calls per column)
                seqs += map(_SEQ, run)
                tss += map(_TS_OF, run)
                kinds += map(_KIND_OF, run)
                hashes += map(_HASH_OF, run)
                prevs += map(_PREV_OF, run)
                # A slice of each entry's stored record (format v2, or made here): no re-encoding.
                data += data_cbor_column(run)
                values += map(_DATA_OF, run)
        if keep is not None:
            mask = list(map(keep, tss, kinds))
            seqs, tss, kinds, hashes, prevs, data, values = (
                list(compress(c, mask)) for c in (seqs, tss, kinds, hashes, prevs, data, values))
        n = len(seqs)
        if not n:
            return 0
        self.owners.append((head.session, head.parent.session if head.parent else None, n))
        self.seqs += seqs
        self.tss += tss
        self.kinds += kinds
        self.hashes += hashes
        self.prevs += prevs
        self.data += data
        self.values += values
        self.rows += n
        self.bytes += sum(map(len, data))
        if len(self.seqs) >= _GATHER_ROWS:
            self._arrow()
        return n

    def _arrow(self) -> None:
        """Make the gathered rows one record batch."""
        n = len(self.seqs)
        if not n:
            return
        ts = pa.array(self.tss, pa.int64()).view(_TS)  # the same 64-bit values, read as ms
        hashed, prev = _hash_columns(self.hashes, self.prevs)
        sessions, parents = _owner_columns(self.owners, n)
        self.chunks.append(pa.RecordBatch.from_arrays([
            sessions,
            pa.array(self.seqs, pa.int64()),
            ts,
            pa.array(self.kinds, pa.string()),
            hashed,
            prev,
            parents,
            pa.array(self.data, pa.binary()),
            _json_array(self.values, len(self.data[n // 2])),
            _date_column(ts, self.tss),
        ], schema=SCHEMA))
        self._clear()

    def take(self, size: int, max_bytes: int | None = None) -> Iterator[pa.RecordBatch]:
        """Batches of exactly ``size`` rows while there are that many; with ``max_bytes``,
        every row held as one batch once their data reach that many bytes."""
        if self.rows < size:
            if max_bytes is not None and self.bytes >= max_bytes:
                yield from self.rest()
            return
        held = self.rows
        self._arrow()
        # A batch is copied together only if it spans chunks: within one chunk it is a
        # view of it (copying every chunk into one first copied each row once more).
        table = pa.Table.from_batches(self.chunks, schema=SCHEMA)
        start = 0
        while self.rows - start >= size:
            yield table.slice(start, size).combine_chunks().to_batches()[0]
            start += size
        rest = table.slice(start)
        self.chunks = rest.combine_chunks().to_batches() if rest.num_rows else []
        self.rows -= start
        self.bytes = self.bytes * self.rows // held

    def rest(self) -> Iterator[pa.RecordBatch]:
        """The remaining rows as one batch."""
        self._arrow()
        if self.rows:
            yield pa.Table.from_batches(self.chunks, schema=SCHEMA).combine_chunks().to_batches()[0]
        self.chunks, self.rows, self.bytes = [], 0, 0


# ---------------------------------------------------------------------------- sessions


def _session_row(head: Head) -> dict[str, Any]:
    labels = head.meta.get("labels") if isinstance(head.meta, dict) else None
    return {
        "session": head.session,
        "created_at": head.created_at,
        "updated_at": head.updated_at,
        "entries": head.entry_count,
        "ts_min": head.ts_min,
        "ts_max": head.ts_max,
        "parent": head.parent.session if head.parent else None,
        "parent_seq": head.parent.seq if head.parent else None,
        "fork_reason": head.parent.reason if head.parent else None,
        "labels": [(_text(k), _label(v)) for k, v in labels.items()] if isinstance(labels, dict) else None,
        "meta_json": _json(head.meta),
        "date": head.created_at // _DAY_MS,
    }


def _sessions_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    cols: dict[str, Any] = {f.name: [r[f.name] for r in rows] for f in SESSIONS_SCHEMA}
    arrays = []
    for f in SESSIONS_SCHEMA:
        if f.name == "date":
            arrays.append(_days_to_dates(pa.array(cols["date"], pa.int32())))
        elif f.type == _TS:
            arrays.append(pa.array(cols[f.name], pa.int64()).cast(_TS))
        else:
            arrays.append(pa.array(cols[f.name], f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=SESSIONS_SCHEMA)
