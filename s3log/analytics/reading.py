"""Batch analytics: many sessions' entries as Arrow record batches, Parquet, DuckDB.

:func:`scan` reads sessions with bounded parallelism (heads, then each session's
segments in parallel), verifies every chain as it reads, and yields record batches of
a fixed schema (:data:`SCHEMA`). Memory is bounded by ``parallelism`` sessions in
flight plus one batch, whatever the size of the prefix. :func:`sessions` gives one row
per session from its head alone (:data:`SESSIONS_SCHEMA`): labels, meta, counts.

:func:`duckdb` registers both as lazy views: every query streams a fresh scan in
small batches, so nothing is materialized and filters given to it (sessions, time
window, kinds) cut the requests made; ``snapshot=True`` reads once into DuckDB tables
instead. Every entry point also opens a log URL with ``storage_options``
(:func:`open_store`). Needs the ``analytics`` extra (pyarrow, duckdb).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
import warnings
import weakref
from array import array
from binascii import hexlify
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from itertools import compress, islice
from operator import attrgetter, ne
from typing import Any, Literal, cast

from s3log._api.core import head_outside
from s3log._extras import extra
from s3log._format import jsonform
from s3log._format.columns import RunColumns
from s3log._format.entries import MAX_TS, data_cbor_column
from s3log._format.ids import validate_session_id
from s3log._format.layout import normalize_prefix
from s3log._format.times import to_ms
from s3log._format.values import HASH_LEN, Head
from s3log._protocol.protocol import Run, is_expired
from s3log.config import LogConfig
from s3log.errors import (
    CorruptionError,
    FormatVersionError,
    InvalidArgumentError,
    S3LogError,
    SessionNotFound,
)
from s3log.log import Log
from s3log.signing import Verifier
from s3log.store.base import ObjectStore

with extra("analytics"):
    import pyarrow as pa

__all__ = [
    "SCHEMA", "SESSIONS_SCHEMA", "TS_RANGE", "VIEW_BATCH_BYTES", "VIEW_BATCH_SIZE", "CorruptSessionWarning",
    "ExportMode", "OutputExistsError", "ProgressCallback", "ScanProgress", "duckdb", "duckdb_parquet", "scan",
    "sessions", "sessions_table", "stream_error", "to_arrow", "to_parquet",
]

_orjson: Any
try:  # optional: several times faster than the json module for data_json
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

log = logging.getLogger(__name__)

_TS = pa.timestamp("ms", tz="UTC")
_DAY_MS = 86_400_000

#: The schema of every batch :func:`scan` yields. ``date`` is ``YYYY-MM-DD`` of ``ts`` (UTC).
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

#: The columns of :data:`SCHEMA` stored inside Parquet files (``date`` is the directory).
_FILE_SCHEMA = SCHEMA.remove(SCHEMA.get_field_index("date"))

ExportMode = Literal["error", "overwrite", "append"]


class CorruptSessionWarning(UserWarning):
    """A session failed to verify and was skipped by a scan."""


class OutputExistsError(S3LogError, FileExistsError):
    """An export target already holds data and no ``mode`` said what to do with it."""

    def __init__(self, target: str) -> None:
        self.target = target
        super().__init__(
            f"{target} is not empty: use mode overwrite (replace what it holds) or append (add files)"
        )


@dataclass(frozen=True, slots=True)
class ScanProgress:
    """How far a scan is: sessions done of the total, entries produced, time taken."""

    sessions_done: int
    sessions_total: int
    entries: int
    elapsed_s: float

    @property
    def entries_per_s(self) -> float:
        """Entries produced per second so far."""
        return self.entries / self.elapsed_s if self.elapsed_s > 0 else 0.0


#: Called with a :class:`ScanProgress` after every session (read or skipped).
ProgressCallback = Callable[[ScanProgress], None]


# ------------------------------------------------------------------------------ values


#: The times, in ms since the epoch, a scan holds: from the epoch (no writer stores an
#: earlier ``ts``) to the last ms DuckDB's ``TIMESTAMPTZ`` (microseconds in 64 bits)
#: holds, 294247-01-10 UTC; Arrow's ``timestamp[ms]`` and ``date32`` hold all of it. A
#: session with an entry ``ts``, or a head time, outside it is a
#: :class:`~s3log.CorruptionError` to a scan (skipped with a
#: :class:`CorruptSessionWarning` unless ``strict``). Python's ``datetime`` ends with
#: year 9999: read later times as ``ts.cast(pa.int64())``.
TS_RANGE = (0, MAX_TS)  # what append takes (s3log._format.entries.MAX_TS)


def _ms(value: int | float | datetime | str | None, name: str = "time") -> int | None:
    """``value`` (ms since the epoch, a datetime, naive as UTC, or an ISO string) in ms,
    checked (:func:`s3log._format.times.to_ms`); None stays None."""
    return None if value is None else to_ms(value, name)


# One rule for JSON everywhere (data_json, the CLI's --json, query, the jsonl export).
_text = jsonform.text
_json_key = jsonform.key
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

    def add(self, head: Head, runs: Iterable[Run], keep: Callable[[int, str], bool] | None = None) -> int:
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


def _out_of_range(t: object) -> bool:
    return isinstance(t, bool) or not isinstance(t, int) or not TS_RANGE[0] <= t <= TS_RANGE[1]


def _check_head_times(head: Head, key: str) -> None:
    """CorruptionError (``key``) if a time of the head is outside :data:`TS_RANGE`:
    no Arrow, DuckDB or Python reader of the session's row could hold it."""
    for name in ("created_at", "updated_at", "ts_min", "ts_max"):
        t = getattr(head, name)
        if t is not None and _out_of_range(t):
            raise CorruptionError(key, f"{name} {t!r} is outside the times a scan holds {TS_RANGE} "
                                       "(ms since the epoch, 1970 to 294247)")


def _check_run_times(head: Head, runs: list[Run], key: str) -> None:
    """CorruptionError (``key``, the seq) if an entry's ts is outside :data:`TS_RANGE`."""
    lo, hi = TS_RANGE
    for run in runs:
        if isinstance(run, RunColumns):
            tss, first = run.ts, run.seq
        elif run:
            tss, first = list(map(_TS_OF, run)), run[0].seq
        else:
            continue
        # Two C passes per run; only a failing run is looked at entry by entry.
        if tss and lo <= min(tss) and max(tss) <= hi:
            continue
        for i, t in enumerate(tss):
            if _out_of_range(t):
                seq = first + i if isinstance(run, RunColumns) else run[i].seq
                raise CorruptionError(key, f"entry ts {t!r} is outside the times a scan holds {TS_RANGE} "
                                           "(ms since the epoch, 1970 to 294247)", seq=seq)


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


# ----------------------------------------------------------------- storage_options


#: ``storage_options`` keys, as deltalake, obstore and pyarrow users write them (any case,
#: with or without ``aws_``), and the boto3 argument each sets.
_STORAGE_KEYS = {
    "endpoint": "endpoint_url", "endpoint_url": "endpoint_url", "endpoint_url_s3": "endpoint_url",
    "region": "region_name", "default_region": "region_name", "region_name": "region_name",
    "access_key_id": "aws_access_key_id", "secret_access_key": "aws_secret_access_key",
    "session_token": "aws_session_token", "token": "aws_session_token",
    "profile": "profile_name", "profile_name": "profile_name",
}
#: Accepted and needing nothing here: boto3 speaks http to an http:// endpoint as given.
_STORAGE_IGNORED = ("allow_http",)


def storage_kwargs(storage_options: object) -> dict[str, str]:
    """``storage_options`` (``{"AWS_ENDPOINT_URL": ..., "AWS_REGION": ...}``) as boto3's
    session and client arguments; an unknown key or a value that is not a string is an
    :class:`~s3log.InvalidArgumentError` naming it."""
    if not isinstance(storage_options, dict):
        raise InvalidArgumentError("storage_options", f"must be a dict of strings, not {storage_options!r}")
    out: dict[str, str] = {}
    for key, value in storage_options.items():
        name = key.lower() if isinstance(key, str) else ""
        name = name[4:] if name.startswith("aws_") else name
        if name in _STORAGE_IGNORED:
            continue
        if name not in _STORAGE_KEYS:
            known = ", ".join(sorted("AWS_" + k.upper() for k in (*_STORAGE_KEYS, *_STORAGE_IGNORED)))
            raise InvalidArgumentError("storage_options", f"unknown key {key!r}: expected one of {known}")
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError("storage_options", f"{key!r} must be a non-empty string, not {value!r}")
        out[_STORAGE_KEYS[name]] = value
    return out


def open_store(
    store: ObjectStore | str, storage_options: dict[str, str] | None = None, prefix: str | None = None
) -> tuple[ObjectStore, str | None]:
    """The store and prefix an analytics entry point reads: ``store`` itself, or the
    store a log URL (``s3://bucket/prefix``, see :mod:`s3log.urls`) names, opened with
    ``storage_options`` (endpoint, region, credentials, profile). ``prefix`` given
    wins over the URL's. Checked before any request is made."""
    if not isinstance(store, str):
        if storage_options is not None:
            raise InvalidArgumentError(
                "storage_options", "opens the store a URL names: pass s3://bucket/prefix instead of a store")
        return store, prefix
    from s3log.urls import parse_url

    spec = parse_url(store)
    if spec.scheme != "s3" or spec.store != "boto3":
        raise InvalidArgumentError("store", f"analytics opens s3:// URLs read with boto3, not {store!r}")
    kwargs = storage_kwargs(storage_options if storage_options is not None else {})
    if spec.endpoint:
        kwargs.setdefault("endpoint_url", spec.endpoint)
    if spec.region:
        kwargs.setdefault("region_name", spec.region)
    return boto3_store(str(spec.bucket), kwargs), spec.prefix if prefix is None else prefix


def boto3_store(bucket: str, kwargs: dict[str, str]) -> ObjectStore:
    """An :class:`~s3log.S3Store` on a client made from :func:`storage_kwargs`' arguments."""
    import boto3

    from s3log.store._s3common import client_config
    from s3log.store.s3 import S3Store

    session_keys = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token", "profile_name")
    session = boto3.session.Session(**{k: v for k, v in kwargs.items() if k in session_keys})
    client = session.client("s3", config=client_config(),
                            **{k: v for k, v in kwargs.items() if k not in session_keys})
    return S3Store(bucket, client=client)


# -------------------------------------------------------------------------------- scan


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(name, f"must be a positive int, not {value!r}")
    return value


def _names(name: str, values: object, what: str) -> list[str]:
    """``values`` as a list of strings: one string, or anything not iterable, is refused."""
    if isinstance(values, str | bytes):
        raise InvalidArgumentError(name, f"must be a list of {what}, not one string ({values!r})")
    if not isinstance(values, Iterable):
        raise InvalidArgumentError(name, f"must be a list of {what}, not {values!r}")
    out = list(values)
    for v in out:
        if not isinstance(v, str):
            raise InvalidArgumentError(name, f"must be a list of {what} (strings), not one holding {v!r}")
    return out


def _session_list(sessions: object) -> list[str] | None:
    """Checked session ids (None: all of them); a bad id fails here, before anything is read."""
    if sessions is None:
        return None
    return [validate_session_id(s) for s in _names("sessions", sessions, "session ids")]


def _session_ids(lg: Log, sessions: Iterable[str] | None, since: int | None = None) -> list[str]:
    if sessions is None:
        # With since: only the sessions that may have been committed to since then, from the
        # activity index when it covers the window (s3log._protocol.retention); every one otherwise.
        return lg.list_session_ids(since=since)
    if isinstance(sessions, str):
        raise ValueError("sessions must be a list of session ids, not one string")
    return list(dict.fromkeys(validate_session_id(s) for s in sessions))


class _Progress:
    def __init__(self, callback: ProgressCallback | None, total: int) -> None:
        self.callback = callback
        self.total = total
        self.done = 0
        self.entries = 0
        self.start = time.perf_counter()

    def step(self, entries: int) -> None:
        self.done += 1
        self.entries += entries
        if self.callback is not None:
            self.callback(ScanProgress(self.done, self.total, self.entries, time.perf_counter() - self.start))


def scan(
    store: ObjectStore | str,
    sessions: Iterable[str] | None = None,
    since: int | float | datetime | str | None = None,
    until: int | float | datetime | str | None = None,
    kinds: Iterable[str] | None = None,
    *,
    prefix: str | None = None,
    batch_size: int = 65_536,
    parallelism: int = 16,
    strict: bool = False,
    progress: ProgressCallback | None = None,
    on_head: Callable[[Head], None] | None = None,
    verifier: Verifier | None = None,
    log_id: str | None = None,
    storage_options: dict[str, str] | None = None,
    batch_bytes: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream the entries of many sessions as Arrow record batches of :data:`SCHEMA`.

    ``sessions``: ids to read (default: every session under the prefix, one LIST per
    1,000); only their heads and segments are read. ``since`` / ``until``: entry time
    bounds (ms since the epoch, datetimes or ISO strings; until is exclusive); sessions
    whose head says all their entries fall outside the window (``ts_min`` / ``ts_max``)
    are skipped without reading their segments. ``kinds``: keep only these kinds.
    ``progress`` is called after every session with a :class:`ScanProgress`;
    ``on_head`` with the head of every session whose entries were read.

    A session that fails to verify is skipped with a :class:`CorruptSessionWarning`
    naming the key and seq, or raises :class:`~s3log.CorruptionError` with ``strict``.
    ``verifier`` (trusted keys, as ``LogConfig(verifier=...)``): a session whose head is
    not validly signed by one of them fails to verify too (a
    :class:`~s3log.signing.SignatureError`); without it signatures are not checked.
    ``log_id``: the identity heads are verified as heads of (as ``LogConfig(log_id=...)``;
    default ``<bucket>/<prefix>``): a copy of a whole log names its original's.

    ``store`` may be a log URL (``s3://bucket/prefix``) opened with ``storage_options``
    (:func:`open_store`). A batch holds ``batch_size`` rows, or with ``batch_bytes``
    fewer once their entries' data reach that many bytes (memory bound by bytes).
    """
    # Every argument is checked here, before anything is read.
    _positive("batch_size", batch_size)
    _positive("parallelism", parallelism)
    if batch_bytes is not None:
        _positive("batch_bytes", batch_bytes)
    lo, hi = _ms(since, "since"), _ms(until, "until")
    kind_set = None if kinds is None else frozenset(_names("kinds", kinds, "kinds"))
    wanted = _session_list(sessions)
    if prefix is not None:
        normalize_prefix(prefix)
    for name, fn in (("progress", progress), ("on_head", on_head)):
        if fn is not None and not callable(fn):
            raise InvalidArgumentError(name, f"must be callable, not {fn!r}")
    _check_verifier(verifier)
    config = _config(parallelism, verifier, log_id)
    store, prefix = open_store(store, storage_options, prefix)
    return _scan(store, wanted, lo, hi, kind_set, prefix, batch_size, batch_bytes, strict, progress, on_head,
                 config)


def _check_verifier(verifier: object) -> None:
    if verifier is not None and not isinstance(verifier, Verifier):
        raise InvalidArgumentError("verifier", f"must be a s3log.signing.Verifier, not {verifier!r}")


def _config(parallelism: int, verifier: Verifier | None, log_id: str | None) -> LogConfig:
    # LogConfig checks log_id (InvalidArgumentError naming it) at the call, before any read.
    return LogConfig(max_parallel=parallelism, verifier=verifier, log_id=log_id)


def _scan(
    store: ObjectStore,
    sessions: Iterable[str] | None,
    lo: int | None,
    hi: int | None,
    kind_set: frozenset[str] | None,
    prefix: str | None,
    batch_size: int,
    batch_bytes: int | None,
    strict: bool,
    progress: ProgressCallback | None,
    on_head: Callable[[Head], None] | None,
    config: LogConfig,
) -> Iterator[pa.RecordBatch]:
    lg = Log(store, prefix=prefix, config=config)

    def read(sid: str) -> tuple[Head, list[Run]] | None:
        try:
            got = lg.read_runs(sid, since=lo, until=hi)
            if got is not None:
                key = lg._core.layout.head(sid)
                _check_head_times(got[0], key)
                _check_run_times(got[0], got[1], key)
            return got
        except SessionNotFound:
            return None  # deleted since it was listed
        except (CorruptionError, FormatVersionError) as exc:
            if strict:
                raise
            warnings.warn(f"skipping session {sid}: {exc}", CorruptSessionWarning, stacklevel=4)
            return None

    keep: Callable[[int, str], bool] | None = None
    if lo is not None or hi is not None or kind_set is not None:
        def keep(ts: int, kind: str) -> bool:
            return (lo is None or ts >= lo) and (hi is None or ts < hi) and (kind_set is None or kind in kind_set)

    try:
        ids = _session_ids(lg, sessions, lo)
        tracker = _Progress(progress, len(ids))
        cols = _Columns()
        for got in _read_in_order(read, ids, config.max_parallel):
            n = 0
            if got is not None:
                head, runs = got
                if on_head is not None:
                    on_head(head)
                n = cols.add(head, runs, keep)
            tracker.step(n)
            yield from cols.take(batch_size, batch_bytes)
        yield from cols.rest()
    finally:
        lg.close()


_Read = tuple[Head, list[Run]] | None


def _read_in_order(read: Callable[[str], _Read], ids: list[str], parallelism: int) -> Iterator[_Read]:
    """``read`` of each id, in order, ``parallelism`` at a time.

    With 1, in the calling thread: one at a time means no thread to hand each session
    over from (measured: a quarter of a scan's CPU from memory went to that hand-over).
    """
    if parallelism == 1:
        yield from map(read, ids)
        return
    with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="s3log-scan") as pool:
        # A sliding window: at most `parallelism` sessions read or being read ahead
        # of the one consumed, which bounds memory; a session starts as soon as the
        # oldest is taken, not when a whole window is done, so one slow session (a
        # head then its segments: two round trips in a row) holds back no others.
        # Sessions come out in order.
        ahead: deque[Future[_Read]] = deque()
        todo = iter(ids)
        try:
            for sid in islice(todo, parallelism):
                ahead.append(pool.submit(read, sid))
            while ahead:
                got = ahead.popleft().result()
                for sid in islice(todo, 1):
                    ahead.append(pool.submit(read, sid))
                yield got
        finally:
            # Stopped early (an error, or the consumer closed the generator): sessions
            # not yet started are not read at all.
            for f in ahead:
                f.cancel()


def to_arrow(store: ObjectStore | str, *args: Any, **kwargs: Any) -> pa.Table:
    """:func:`scan` collected into one Arrow table.

    ``table.to_pandas()`` gives ``ts`` as ``datetime64[ms, UTC]``, so
    ``df[df.ts > "2026-01-01"]`` works.
    """
    return pa.Table.from_batches(list(scan(store, *args, **kwargs)), schema=SCHEMA)


def with_date(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its ``date`` column (kept for callers of older versions: scan has it)."""
    if "date" in batch.schema.names:
        return batch
    import pyarrow.compute as pc

    return batch.append_column("date", pc.strftime(batch.column("ts"), format="%Y-%m-%d"))


# ---------------------------------------------------------------------------- sessions


def sessions(
    store: ObjectStore | str,
    sessions: Iterable[str] | None = None,
    since: int | float | datetime | str | None = None,
    until: int | float | datetime | str | None = None,
    *,
    prefix: str | None = None,
    batch_size: int = 1_000,
    parallelism: int = 16,
    strict: bool = False,
    verifier: Verifier | None = None,
    log_id: str | None = None,
    storage_options: dict[str, str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """One row per session (:data:`SESSIONS_SCHEMA`), from its head: one GET each.

    ``labels`` is ``meta["labels"]`` as a string map (non-string values as JSON), so
    ``labels['tenant']`` works in SQL; ``meta_json`` is the whole meta. With ``since`` /
    ``until``, sessions whose entries all fall outside the window are left out (as
    :func:`scan` skips them). Missing, unreadable and expired heads are left out; a head
    with a time outside :data:`TS_RANGE` is left out with a :class:`CorruptSessionWarning`,
    or raises :class:`~s3log.CorruptionError` with ``strict``. With ``verifier`` (trusted
    keys), a head not validly signed by one of them (as a head of the log ``log_id``, as
    :func:`scan`'s) is unreadable: left out. ``store`` may be a log URL opened with
    ``storage_options``, as for :func:`scan`.
    """
    lo, hi = _ms(since, "since"), _ms(until, "until")
    wanted = _session_list(sessions)
    if prefix is not None:
        normalize_prefix(prefix)
    _positive("batch_size", batch_size)
    _positive("parallelism", parallelism)
    _check_verifier(verifier)
    config = _config(parallelism, verifier, log_id)
    store, prefix = open_store(store, storage_options, prefix)
    return _sessions(store, wanted, lo, hi, prefix, batch_size, strict, config)


def _sessions(
    store: ObjectStore, wanted: list[str] | None, lo: int | None, hi: int | None, prefix: str | None,
    batch_size: int, strict: bool, config: LogConfig,
) -> Iterator[pa.RecordBatch]:
    lg = Log(store, prefix=prefix, config=config)
    try:
        ids = _session_ids(lg, wanted, lo)
        rows: list[dict[str, Any]] = []
        # Heads are read `max_parallel` at a time and each made its row at once: a head
        # holds its tail (up to tens of KiB decoded), so a batch's worth of heads held
        # together grew with the prefix; the rows are small.
        step = config.max_parallel
        for start in range(0, len(ids), step):
            for r in lg.heads(ids[start : start + step]):
                head = r.head
                if head is None or is_expired(head) or (
                        (lo is not None or hi is not None) and head_outside(head, lo, hi)):
                    continue
                try:
                    _check_head_times(head, lg._core.layout.head(head.session))
                except CorruptionError as exc:
                    if strict:
                        raise
                    warnings.warn(f"skipping session {head.session}: {exc}", CorruptSessionWarning, stacklevel=3)
                    continue
                rows.append(_session_row(head))
            while len(rows) >= batch_size:
                yield _sessions_batch(rows[:batch_size])
                rows = rows[batch_size:]
        if rows:
            yield _sessions_batch(rows)
    finally:
        lg.close()


def sessions_table(store: ObjectStore | str, *args: Any, **kwargs: Any) -> pa.Table:
    """:func:`sessions` collected into one Arrow table."""
    return pa.Table.from_batches(list(sessions(store, *args, **kwargs)), schema=SESSIONS_SCHEMA)


# ----------------------------------------------------------------------------- parquet


def _filesystem_for(path_or_uri: str, store: Any, filesystem: Any) -> tuple[Any, str]:
    from pyarrow import fs

    if filesystem is not None:
        return filesystem, path_or_uri
    if path_or_uri.startswith("s3://"):
        return _s3_filesystem(path_or_uri, _endpoint_of(store))
    import os

    return fs.LocalFileSystem(), os.path.abspath(path_or_uri)


def prepare_output(filesystem: Any, target: str, mode: ExportMode) -> None:
    """Apply ``mode`` to an export target before anything is written.

    ``error`` (the default of every export): fail with :class:`OutputExistsError` if
    the target holds any file; ``overwrite``: delete what it holds (stale partitions
    included); ``append``: keep it (new files get unique names). :func:`to_parquet` and
    ``s3log export`` delete nothing here: they write an overwrite elsewhere first and
    swap it in once written (:func:`output_dir`).
    """
    if check_output(filesystem, target, mode):
        filesystem.delete_dir_contents(target, missing_dir_ok=True)


def check_output(filesystem: Any, target: str, mode: ExportMode) -> bool:
    """The checks of :func:`prepare_output`, deleting nothing: whether ``mode`` will
    delete what the target holds (``overwrite`` of an existing directory)."""
    from pyarrow import fs

    if mode not in ("error", "overwrite", "append"):
        raise InvalidArgumentError("mode", f"unknown mode {mode!r}: use error, overwrite or append")
    info = filesystem.get_file_info(target)
    if info.type == fs.FileType.NotFound:
        return False
    if info.type != fs.FileType.Directory:
        raise OutputExistsError(target + " (a file, not a directory)")
    if mode == "error" and filesystem.get_file_info(fs.FileSelector(target, recursive=False)):
        raise OutputExistsError(target)
    return mode == "overwrite"


@contextlib.contextmanager
def output_dir(filesystem: Any, target: str, clear: bool) -> Iterator[str]:
    """The directory an export of ``target`` writes into; with ``clear`` (``overwrite``
    of an existing directory, :func:`check_output`) a new one, which replaces what
    ``target`` holds only once the block ends without an exception.

    So a scan failing part way (a store fault, a strict scan's corrupt session) leaves
    the old export as it was: what was written goes with the staging directory. On a
    local filesystem the staging directory is a hidden sibling of ``target``, swapped
    in by two renames (the old export moved aside, the new one moved in, then the old
    one deleted); elsewhere (S3) it is a hidden ``.s3log-staging-*`` folder inside
    ``target`` (within the same bucket and permissions), whose files are moved up once
    the old ones are deleted: a failure during that move (not during the scan) can
    leave part of each.
    """
    if not clear:
        yield target
        return
    from pyarrow import fs

    local = isinstance(filesystem, fs.LocalFileSystem)
    tag = uuid.uuid4().hex[:12]
    if local:
        import os

        target = os.path.normpath(target)
        parent, name = os.path.split(target)
        staging = os.path.join(parent, f".{name}.s3log-staging-{tag}")
        aside = os.path.join(parent, f".{name}.s3log-old-{tag}")
    else:
        target = target.rstrip("/")
        staging, aside = f"{target}/.s3log-staging-{tag}", ""
    filesystem.create_dir(staging, recursive=True)
    try:
        yield staging
    except BaseException:
        # The export failed (or was interrupted): what it wrote goes, the old one stays.
        with contextlib.suppress(Exception):
            filesystem.delete_dir(staging)
        raise
    if local:
        _swap_in(filesystem, staging, target, aside)
    else:
        _move_up(filesystem, staging, target)


def _swap_in(filesystem: Any, staging: str, target: str, aside: str) -> None:
    """Replace the local directory ``target`` by ``staging``: renames, each atomic."""
    try:
        filesystem.move(target, aside)
    except OSError:
        # Not renamable (a mount point, no write access to its parent): its contents are
        # replaced instead, once the new export is complete.
        _move_up(filesystem, staging, target)
        return
    try:
        filesystem.move(staging, target)
    except BaseException:
        filesystem.move(aside, target)  # the old export back where it was
        raise
    try:
        filesystem.delete_dir(aside)
    except OSError as exc:  # the new export is in place: only disk space is at stake
        log.warning("export: could not delete the replaced export moved aside to %s: %s", aside, exc)


def _move_up(filesystem: Any, staging: str, target: str) -> None:
    """Replace what ``target`` holds by the files of ``staging`` (a folder inside it)."""
    from pyarrow import fs

    for info in filesystem.get_file_info(fs.FileSelector(target, recursive=False)):
        if info.path.rstrip("/") == staging:
            continue
        if info.type == fs.FileType.Directory:
            filesystem.delete_dir(info.path)
        else:
            filesystem.delete_file(info.path)
    made: set[str] = set()
    for info in filesystem.get_file_info(fs.FileSelector(staging, recursive=True)):
        if info.type != fs.FileType.File:
            continue
        dest = target + info.path[len(staging):]
        folder = dest.rsplit("/", 1)[0]
        if folder not in made:
            filesystem.create_dir(folder, recursive=True)
            made.add(folder)
        filesystem.move(info.path, dest)
    filesystem.delete_dir(staging)


def checked_scan(store: ObjectStore | str, *args: Any, **kwargs: Any) -> Generator[pa.RecordBatch, None, None]:
    """:func:`scan` of these arguments, every one checked now (an unknown option too, as
    :class:`~s3log.InvalidArgumentError`): nothing is read until the first batch is taken."""
    import inspect

    params = inspect.signature(scan).parameters
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        raise InvalidArgumentError(unknown[0], f"not an option of scan (use {', '.join(list(params)[1:])})")
    try:
        inspect.signature(scan).bind(store, *args, **kwargs)
    except TypeError as exc:
        raise InvalidArgumentError("scan arguments", str(exc)) from None
    return cast(Generator[pa.RecordBatch, None, None], scan(store, *args, **kwargs))


def first_then(batches: Generator[pa.RecordBatch, None, None]) -> Generator[pa.RecordBatch, None, None]:
    """``batches`` with its first batch already taken: the store has answered (a missing
    bucket, a strict scan's first corrupt session fail here), then the same batches."""
    first = next(batches, None)

    def again() -> Generator[pa.RecordBatch, None, None]:
        try:
            if first is not None:
                yield first
                yield from batches
        finally:
            batches.close()

    return again()


def to_parquet(
    store: ObjectStore | str,
    path_or_uri: str,
    *args: Any,
    partition_by: str | None = "date",
    filesystem: Any = None,
    mode: ExportMode = "error",
    sessions_file: bool = True,
    **kwargs: Any,
) -> int:
    """Write the scan as Parquet under a directory or ``s3://bucket/prefix``.

    ``partition_by="date"`` writes Hive-style ``date=YYYY-MM-DD/`` directories, so a
    query engine filtering on date reads only the matching files. ``mode``: what to do
    if the target already holds data (``error``, ``overwrite`` or ``append``, see
    :func:`prepare_output`); an overwrite replaces the old export only once the whole
    scan is written (:func:`output_dir`), so a scan failing part way leaves it. With
    ``sessions_file`` the heads read are also written as ``_sessions.parquet``
    (:data:`SESSIONS_SCHEMA`; engines reading the directory as a dataset skip ``_``
    files). ``scan`` options (``since``, ``kinds``, ``progress``, ``storage_options``...)
    pass through. Returns the row count.
    """
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    if partition_by is not None and partition_by not in SCHEMA.names:
        raise InvalidArgumentError(
            "partition_by", f"cannot partition by {partition_by!r}: not a column of {SCHEMA.names}")
    if mode not in ("error", "overwrite", "append"):
        raise InvalidArgumentError("mode", f"unknown mode {mode!r}: use error, overwrite or append")
    heads: list[dict[str, Any]] = []
    lock = threading.Lock()
    rows = 0

    def keep(head: Head) -> None:
        with lock:
            heads.append(_session_row(head))

    # Every argument is checked, and the store has answered, before anything is deleted:
    # a typo or a missing bucket never empties an export.
    if "on_head" in kwargs:
        raise InvalidArgumentError("on_head", "to_parquet keeps the heads itself (sessions_file)")
    store = _opened(store, kwargs)
    scanned = checked_scan(store, *args, on_head=keep if sessions_file else None, **kwargs)
    filesystem, target = _filesystem_for(path_or_uri, store, filesystem)
    try:
        clear = check_output(filesystem, target, mode)
        scanned = first_then(scanned)
    except BaseException:
        scanned.close()
        raise

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for b in scanned:
            rows += b.num_rows
            yield b

    partitioning = None
    if partition_by is not None:
        partitioning = ds.partitioning(pa.schema([SCHEMA.field(partition_by)]), flavor="hive")
    # Overwrite writes a new directory and replaces the old export with it only once the
    # whole scan is written: a scan failing after its first batch leaves the old one.
    try:
        with output_dir(filesystem, target, clear) as where:
            ds.write_dataset(
                batches(), where, schema=SCHEMA, format="parquet", partitioning=partitioning,
                filesystem=filesystem,
                # A unique name per export: append mode adds files instead of replacing part-0.
                basename_template=f"part-{uuid.uuid4().hex[:12]}-{{i}}.parquet",
                existing_data_behavior="overwrite_or_ignore", max_rows_per_group=65_536,
            )
            if sessions_file:
                table = pa.Table.from_batches([_sessions_batch(heads)] if heads else [], schema=SESSIONS_SCHEMA)
                name = "_sessions.parquet" if mode != "append" else f"_sessions-{uuid.uuid4().hex[:12]}.parquet"
                filesystem.create_dir(where, recursive=True)
                pq.write_table(table, f"{where.rstrip('/')}/{name}", filesystem=filesystem)
    finally:
        scanned.close()
    return rows


def _endpoint_of(store: Any) -> str | None:
    """The endpoint a boto3-backed store talks to, so an export goes to the same place."""
    client = getattr(store, "client", None)
    meta = getattr(client, "meta", None)
    url = getattr(meta, "endpoint_url", None)
    if isinstance(url, str) and "amazonaws.com" not in url:
        return url
    return None


def _s3_filesystem(uri: str, endpoint: str | None) -> tuple[Any, str]:
    import os

    from pyarrow import fs

    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    kwargs: dict[str, Any] = {"region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        kwargs.update(endpoint_override=host, scheme=scheme)
    return fs.S3FileSystem(**kwargs), uri[len("s3://"):]


# ------------------------------------------------------------------------------ duckdb


class LazyBatches:
    """A re-readable Arrow stream: every read (``__arrow_c_stream__``) starts a new one.

    DuckDB reads a registered object once per query that scans it, so a view over this
    streams a fresh scan per query, batch by batch, instead of holding a table. It asks
    for the stream more than once while planning; the generator starts only when the
    first batch is pulled, so those extra calls read nothing.
    """

    def __init__(self, schema: pa.Schema, make: Callable[[], Iterator[pa.RecordBatch]]) -> None:
        self.schema = schema
        self._make = make
        #: The exception that ended the last stream read, as raised (None if it ended
        #: well): DuckDB reports it only as text inside its own error.
        self.error: BaseException | None = None

    def _batches(self) -> Iterator[pa.RecordBatch]:
        self.error = None
        try:
            yield from self._make()
        except Exception as exc:
            self.error = exc
            raise

    def reader(self) -> pa.RecordBatchReader:
        """A new reader over a new scan."""
        return pa.RecordBatchReader.from_batches(self.schema, self._batches())

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        """The Arrow PyCapsule stream protocol: a new scan per call."""
        return self.reader().__arrow_c_stream__(requested_schema)


#: Rows per batch the DuckDB views stream by default: DuckDB's own vector size, so
#: what is held at once (a batch per DuckDB thread, and the one being filled) stays small.
VIEW_BATCH_SIZE = 2048
#: And the bytes of entry data a view's batch is cut at (entries of many KiB each).
VIEW_BATCH_BYTES = 2**20


def _opened(store: ObjectStore | str, kwargs: dict[str, Any]) -> ObjectStore:
    """``store`` opened once (a URL with ``kwargs``' ``storage_options``): the prefix a
    URL names goes into ``kwargs``, so every scan made from them reads the same store."""
    opened, prefix = open_store(store, kwargs.pop("storage_options", None), kwargs.get("prefix"))
    if prefix is not None:
        kwargs["prefix"] = prefix
    return opened


def duckdb(
    connection: Any,
    store: ObjectStore | str,
    *args: Any,
    view: str = "entries",
    sessions_view: str | None = "sessions",
    snapshot: bool = False,
    **kwargs: Any,
) -> Any:
    """Register lazy DuckDB views over the store; returns the connection.

    ``view`` (default ``entries``, :data:`SCHEMA`) streams :func:`scan` with the given
    arguments each time a query reads it: ``sessions=``, ``since=``/``until=`` and
    ``kinds=`` cut the requests made, not only the rows. ``sessions_view`` (default
    ``sessions``, :data:`SESSIONS_SCHEMA`, ``None`` for none) streams one row per
    session from the heads, joinable on ``session``. Batches of :data:`VIEW_BATCH_SIZE`
    rows (or :data:`VIEW_BATCH_BYTES` of data) unless ``batch_size`` says otherwise.

    ``snapshot=True`` reads the store once, now, into DuckDB tables of the same names:
    every later query reads those tables (no request; writes made since are not seen
    until ``duckdb(...)`` is called again). ``store`` may be a log URL opened with
    ``storage_options``, as for :func:`scan`.
    """
    _view_names(view, sessions_view)
    if not isinstance(snapshot, bool):
        raise InvalidArgumentError("snapshot", f"must be True or False, not {snapshot!r}")
    store = _opened(store, kwargs)
    if "batch_size" not in kwargs:
        kwargs.setdefault("batch_bytes", VIEW_BATCH_BYTES)
    kwargs.setdefault("batch_size", VIEW_BATCH_SIZE)
    # Checked now, not at the first query (then DuckDB would report them as its own text).
    checked_scan(store, *args, **kwargs).close()
    entries = LazyBatches(SCHEMA, lambda: scan(store, *args, **kwargs))
    streams = [entries]
    named = [(view, entries)]
    if sessions_view is not None:
        options = {k: v for k, v in kwargs.items()
                   if k in ("sessions", "since", "until", "prefix", "parallelism", "strict", "verifier", "log_id")}
        for name, value in zip(("sessions", "since", "until"), args, strict=False):
            options[name] = value
        cast(Generator[pa.RecordBatch, None, None], sessions(store, **options)).close()
        heads = LazyBatches(SESSIONS_SCHEMA, lambda: sessions(store, **options))
        streams.append(heads)
        named.append((sessions_view, heads))
    _streams[connection] = streams
    for name, stream in named:
        connection.register(f"{name}__s3log", stream)
        # A name is a view or a table, whichever the last call made it.
        connection.execute(f'DROP {"VIEW" if snapshot else "TABLE"} IF EXISTS "{name}"')
        kind = "TABLE" if snapshot else "VIEW"
        connection.execute(f'CREATE OR REPLACE {kind} "{name}" AS SELECT * FROM "{name}__s3log"')
        if snapshot:
            connection.unregister(f"{name}__s3log")
    return connection


#: The streams :func:`duckdb` registered on each connection (for :func:`stream_error`).
_streams: weakref.WeakKeyDictionary[Any, list[LazyBatches]] = weakref.WeakKeyDictionary()


def stream_error(connection: Any) -> BaseException | None:
    """The exception that ended a scan behind the views :func:`duckdb` registered on
    ``connection`` in its last query, as raised (a :class:`~s3log.CorruptionError`
    under ``strict``, a store error...): DuckDB's own error carries it only as text."""
    for stream in _streams.get(connection, ()):
        if stream.error is not None:
            return stream.error
    return None


def _view_names(*names: str | None) -> None:
    for name in names:
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise InvalidArgumentError("view", f"view name {name!r} must be an identifier")


def _day_text(ms: int) -> str:
    """``YYYY-MM-DD`` (UTC) of a time of :data:`TS_RANGE`, years after 9999 too."""
    text: str = _days_to_dates(pa.array([ms // _DAY_MS], pa.int32()))[0].as_py()
    return text


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_list(values: Iterable[str]) -> str:
    return "(" + ", ".join(_sql_str(v) for v in values) + ")"


def duckdb_parquet(
    connection: Any,
    directory: str,
    *,
    sessions: Iterable[str] | None = None,
    since: int | float | datetime | str | None = None,
    until: int | float | datetime | str | None = None,
    kinds: Iterable[str] | None = None,
    view: str = "entries",
    sessions_view: str | None = "sessions",
) -> Any:
    """The views of :func:`duckdb` over a local export written by :func:`to_parquet`.

    The filters become a ``WHERE`` that DuckDB pushes into the files: a time window
    selects ``date=`` directories before any file is opened, and DuckDB skips row
    groups by their statistics. The ``sessions`` view reads ``_sessions*.parquet``.
    """
    _view_names(view, sessions_view)
    import glob
    import os

    lo, hi = _ms(since, "since"), _ms(until, "until")
    if hi is not None and hi > TS_RANGE[1]:
        hi = None  # after every time an export holds (and past what DuckDB's to_timestamp takes)
    lo_day = None if lo is None else _day_text(lo)
    hi_day = None if hi is None else _day_text(max(hi - 1, 0))
    where: list[str] = []
    if lo is not None:
        where.append(f"ts >= to_timestamp({lo} / 1000.0)" if lo <= TS_RANGE[1] else "false")
    if hi is not None:
        where.append(f"ts < to_timestamp({hi} / 1000.0)")
    if kinds is not None:
        kind_list = _names("kinds", kinds, "kinds")
        where.append(f"kind IN {_sql_list(kind_list)}" if kind_list else "false")
    ids = _session_list(sessions)
    # The sessions view keeps the sessions duckdb()'s would: those named, and with a
    # window those with an entry that can fall inside it (from ts_min / ts_max).
    heads_where: list[str] = []
    if ids is not None:
        where.append(f"session IN {_sql_list(ids)}" if ids else "false")
        heads_where.append(f"session IN {_sql_list(ids)}" if ids else "false")
    if lo is not None or hi is not None:
        heads_where.append("ts_min IS NOT NULL")
    if lo is not None:
        heads_where.append(f"ts_max >= to_timestamp({lo} / 1000.0)" if lo <= TS_RANGE[1] else "false")
    if hi is not None:
        heads_where.append(f"ts_min < to_timestamp({hi} / 1000.0)")
    clause = (" WHERE " + " AND ".join(where)) if where else ""
    root = directory.rstrip("/")
    # The time window picks date= directories here, so files of other days are never
    # opened (not even to bind the view's schema).
    days = []
    for path in sorted(glob.glob(os.path.join(glob.escape(root), "date=*"))):
        day = os.path.basename(path)[len("date="):]
        if (lo_day is None or day >= lo_day) and (hi_day is None or day <= hi_day) and glob.glob(
                os.path.join(glob.escape(path), "*.parquet")):
            days.append(os.path.join(path, "*.parquet"))
    columns = ", ".join(f'"{c}"' for c in SCHEMA.names)
    if days:
        files = "[" + ", ".join(_sql_str(d) for d in days) + "]"
        source = f"read_parquet({files}, hive_partitioning = true, hive_types = {{'date': 'VARCHAR'}})"
    else:  # nothing exported in the window: an empty view of the same columns
        connection.register(f"{view}__empty", SCHEMA.empty_table())
        source = f'"{view}__empty"'
    connection.execute(f'CREATE OR REPLACE VIEW "{view}" AS SELECT {columns} FROM {source}{clause}')
    if sessions_view is not None:
        heads = f"{root}/_sessions*.parquet"
        if connection.execute(f"SELECT count(*) FROM glob({_sql_str(heads)})").fetchone()[0]:
            source = f"read_parquet({_sql_str(heads)}, union_by_name = true)"
        else:
            connection.register(f"{sessions_view}__empty", SESSIONS_SCHEMA.empty_table())
            source = f'"{sessions_view}__empty"'
        keep = (" WHERE " + " AND ".join(heads_where)) if heads_where else ""
        connection.execute(f'CREATE OR REPLACE VIEW "{sessions_view}" AS SELECT * FROM {source}{keep}')
    return connection
