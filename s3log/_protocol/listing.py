"""Listings, sans-IO: every key under a prefix, session ids, heads of many sessions, and
bounded listings of the newest sessions without listing every session.

:func:`list_all`, :func:`list_session_ids` and :func:`list_head_rows` are what gc,
delete, retention and fork lookups list with; the rest of this module is the bounded
listing (:func:`newest_ids`, :func:`session_page`).

Session folders are listed in key order, and UUIDv7 ids (the default) sort by
creation time, so the newest sessions are the *last* keys of ``{P}/sessions/``. S3
lists forwards only; to find the last ``limit`` keys without paging through the
whole prefix, :func:`newest_ids` lists from a time bound (``StartAfter`` the smallest
id of "now - 1 minute"), and widens the window backwards (10 minutes, an hour, 6
hours, a day, a week, 30 days, a year, then everything) until ``limit`` ids are found.
A window holding more than one page of ids is narrowed by bisection on time, so a
burst of a million sessions in the last second costs a few dozen LISTs, not a
thousand.

The order is **reverse key order**: newest first for UUIDv7 ids. Caller-chosen ids
(``log.create("thread-7")``) are not times: they sort by their text, among the UUIDv7
ids. An id that sorts after every UUIDv7 id (most names starting with a letter do:
``"t" > "0"``) is listed at the top of every first page, and each listing pays for
them (one LIST per 1,000); ids sorting below the current time bound are found when
the window widens past them. Nothing is skipped: every id appears exactly once when
paging with the ``after`` cursor; only the cost depends on how ids are chosen
(docs/operations.md, "Scale and retention").

The ``after`` cursor is the last id of the previous page: the next page lists ids
sorting before it. It is opaque to callers and stays valid while sessions come and go.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from s3log._format.cbor import dumps, loads
from s3log._format.codec import decode_head
from s3log._format.ids import uuid7_time_ms, validate_session_id
from s3log._format.layout import Layout
from s3log._format.values import Head
from s3log._protocol import ops
from s3log._protocol.ops import Get, ListPage, ObjectInfo, Proc
from s3log._protocol.probe import PROBE_DIR
from s3log._protocol.read import check_head
from s3log.errors import CorruptionError, FormatVersionError, InvalidSessionIdError, ObjectNotFound
from s3log.results import HeadRow

log = logging.getLogger("s3log")

def list_all(prefix: str, *, delimiter: str | None = None) -> Proc[tuple[list[ObjectInfo], list[str]]]:
    """Every key (and common prefix) under ``prefix``, page after page."""
    objects: list[ObjectInfo] = []
    prefixes: list[str] = []
    token: str | None = None
    while True:
        page = yield from ops.list_page(prefix, delimiter=delimiter, token=token)
        objects.extend(page.objects)
        prefixes.extend(page.prefixes)
        token = page.next_token
        if token is None:
            return objects, prefixes


def _session_ids(layout: Layout, prefixes: Sequence[str]) -> list[str]:
    # A folder whose name is not a valid session id is not a session: skip it (and
    # say so) instead of failing every listing of the bucket.
    base = layout.sessions_prefix
    return valid_ids([p[len(base):].rstrip("/") for p in prefixes if not p.endswith("/" + PROBE_DIR)], base)


def valid_ids(names: Sequence[str], base: str) -> list[str]:
    """The ``names`` (found under ``base``) that are session ids; the others are not
    s3log's (stray objects or folders): skipped, with a warning naming them."""
    out: list[str] = []
    for name in names:
        if not name:
            continue
        try:
            validate_session_id(name)
        except InvalidSessionIdError:
            log.warning("skipping %r under %s: not a valid session id", name, base)
            continue
        out.append(name)
    return out


def list_session_ids(layout: Layout, prefix: str = "") -> Proc[list[str]]:
    """The session ids under the layout's prefix that start with ``prefix`` (every one by
    default), newest first (UUIDv7 ids sort by time); one LIST per 1,000."""
    _, prefixes = yield from list_all(layout.sessions_prefix + prefix, delimiter="/")
    return sorted(_session_ids(layout, prefixes), reverse=True)


def list_head_rows(layout: Layout, sessions: Sequence[str]) -> Proc[list[HeadRow]]:
    """The heads of ``sessions``, fetched concurrently.

    A session whose head is missing (deleted meanwhile, or a folder left without a
    head by a failed create) is left out; one whose head cannot be read or decoded
    (corrupt, a future format version) is a row with ``error`` set.
    """
    if not sessions:
        return []
    results = yield from ops.parallel([Get(layout.head(s)) for s in sessions])
    out: list[HeadRow] = []
    for sid, res in zip(sessions, results, strict=True):
        key = layout.head(sid)
        if isinstance(res, ObjectNotFound):
            continue
        if isinstance(res, BaseException):
            out.append(HeadRow(sid, None, str(res)))
            continue
        try:
            head = decode_head(res.body, key)
            yield from check_head(layout, head, sid, key)
        except (CorruptionError, FormatVersionError) as exc:
            log.warning("session %s has an unreadable head: %s", sid, exc)
            out.append(HeadRow(sid, None, str(exc)))
            continue
        out.append(HeadRow(sid, head, etag=res.etag))
    return out


#: How far back each window of :func:`newest_ids` reaches from its start, in ms.
WINDOWS_MS: tuple[int, ...] = (
    60_000, 600_000, 3_600_000, 6 * 3_600_000, 86_400_000, 7 * 86_400_000, 30 * 86_400_000, 365 * 86_400_000,
)
#: Ids per LIST page (S3's maximum).
PAGE = 1000


def bound_id(ms: int) -> str:
    """A string sorting just below every UUIDv7 id made at ``ms`` and above every earlier one.

    The first 13 characters of such ids (``xxxxxxxx-xxxx``) are the time; any id made
    at ``ms`` starts with them and is longer, so it sorts after.
    """
    h = f"{max(0, min(ms, (1 << 48) - 1)):012x}"
    return f"{h[:8]}-{h[8:]}"


@dataclass
class _Window:
    """Ids listed between two bounds (exclusive), ascending, and whether all were seen."""

    ids: list[str]
    complete: bool


def _page(layout: Layout, lower: str | None, token: str | None) -> Proc[ListPage]:
    base = layout.sessions_prefix
    return (yield from ops.list_page(
        base, delimiter="/", token=token, max_keys=PAGE, start_after=None if lower is None else base + lower
    ))


def _ids_of(layout: Layout, page: ListPage, upper: str | None) -> tuple[list[str], bool]:
    """The session ids of a page below ``upper``, and whether the page went past it."""
    ids = _session_ids(layout, page.prefixes)
    below = [s for s in ids if upper is None or s < upper]
    # A prefix at or past the bound, even one that is no valid session, ends the window.
    base = layout.sessions_prefix
    past = upper is not None and any(p[len(base):].rstrip("/") >= upper for p in page.prefixes)
    return below, past


def _list_window(layout: Layout, lower: str | None, upper: str | None, max_pages: int | None) -> Proc[_Window]:
    """Ids in (lower, upper), at most ``max_pages`` LISTs (None: until the window ends)."""
    out: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        page = yield from _page(layout, lower, token)
        pages += 1
        ids, past = _ids_of(layout, page, upper)
        out.extend(ids)
        token = page.next_token
        if past or token is None:
            return _Window(out, True)
        if max_pages is not None and pages >= max_pages:
            return _Window(out, False)


def _newest_in(
    layout: Layout, lo_ms: int | None, hi_ms: int, upper: str | None, need: int
) -> Proc[list[str]]:
    """Ids in (bound(lo_ms), upper), ascending; only the newest ``need`` are required.

    A window of at most one page costs one LIST. A denser one is narrowed by bisection
    on time: the latest bound whose tail up to ``upper`` fits in one page yet holds
    ``need`` ids. ``lo_ms`` None: from the very first key.
    """
    lower = None if lo_ms is None else bound_id(lo_ms)
    first = yield from _list_window(layout, lower, upper, 1)
    if first.complete or need >= PAGE:
        if first.complete:
            return first.ids
        rest = yield from _list_window(layout, lower, upper, None)
        return rest.ids
    lo, hi = (0 if lo_ms is None else lo_ms), hi_ms
    while hi - lo > 1:
        mid = (lo + hi) // 2
        probe = yield from _list_window(layout, bound_id(mid), upper, 1)
        if not probe.complete:
            lo = mid  # still more than a page above mid: the bound moves later
        elif len(probe.ids) >= need:
            return probe.ids  # the newest `need` ids are all above mid
        else:
            hi = mid  # too few above mid: the bound moves earlier
    full = yield from _list_window(layout, bound_id(lo), upper, None)
    return full.ids


def newest_ids(layout: Layout, limit: int, *, after: str | None = None, now: int) -> Proc[list[str]]:
    """The ``limit`` session ids sorting last before ``after`` (all ids if None), last first.

    For UUIDv7 ids that is the ``limit`` newest sessions created before ``after``.
    Costs one LIST per window tried (see the module docstring), plus the pages of any
    window denser than one page.
    """
    if limit <= 0:
        return []
    upper = after
    start = now
    if after is not None:
        t = uuid7_time_ms(after)
        if t is not None:
            start = min(now, t)
    # Ids above the first window's bound but past `start` (the future, or names
    # sorting after every UUIDv7 id) belong to the first window.
    hi_ms = max(now, start) + 1
    found: list[str] = []
    spans: Sequence[int | None] = (*WINDOWS_MS, None)
    for span in spans:
        lo_ms = None if span is None else max(0, start - span)
        lower = None if lo_ms is None else bound_id(lo_ms)
        if lower is not None and upper is not None and lower >= upper:
            continue  # the window lies entirely above the cursor
        ids = yield from _newest_in(layout, lo_ms, hi_ms, upper, limit - len(found))
        found = ids + found
        if len(found) >= limit or lower is None:
            break
        upper, hi_ms = lower, lo_ms if lo_ms is not None else 0
    return found[::-1][:limit]


# ------------------------------------------------------------------------ with heads


def check_labels(labels: object) -> dict[str, str] | None:
    """Validate a label filter: a map of strings to values (compared as text)."""
    if labels is None:
        return None
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) for k in labels):
        raise _argument_error("labels", f"must be a mapping of label names to values, not {labels!r}")
    return {k: label_text(v) for k, v in labels.items()}


def label_text(value: Any) -> str:
    """A label value as text: strings as they are, anything else as JSON (as analytics shows them)."""
    if isinstance(value, str):
        return value
    import json

    return json.dumps(loads(dumps(value)), sort_keys=True, separators=(",", ":"), default=str)


def matches(head: Head, labels: Mapping[str, str] | None) -> bool:
    """Whether ``head.meta["labels"]`` holds every ``labels`` pair (values compared as text)."""
    if not labels:
        return True
    have = head.meta.get("labels") if isinstance(head.meta, dict) else None
    if not isinstance(have, dict):
        return False
    return all(k in have and label_text(have[k]) == v for k, v in labels.items())


def check_after(after: object) -> str | None:
    """Validate an ``after`` cursor (a session id)."""
    return None if after is None else validate_session_id(after)


def check_limit(limit: object) -> int | None:
    """Validate a ``limit``: None or a non-negative integer."""
    if limit is None:
        return None
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise _argument_error("limit", f"must be a non-negative integer or None, not {limit!r}")
    return limit


def _argument_error(name: str, reason: str) -> Exception:
    from s3log.errors import InvalidArgumentError

    return InvalidArgumentError(name, reason)


def session_page(
    layout: Layout,
    want: int,
    *,
    labels: Mapping[str, str] | None,
    after: str | None,
    now: int,
    batch: int,
) -> Proc[tuple[list[HeadRow], str | None]]:
    """Up to ``want`` sessions before ``after``, newest first, with their heads.

    Ids are taken ``batch`` at a time (:func:`newest_ids`) and their heads fetched in
    parallel (the driver bounds the concurrency by ``LogConfig.max_parallel``). Expired
    sessions (tombstones, :mod:`s3log._protocol.retention`) are left out; with ``labels``, so are
    sessions whose ``meta["labels"]`` do not hold them, and broken heads. Returns the
    rows and the cursor to continue from (None when no session is left).
    """
    rows: list[HeadRow] = []
    cursor = after
    while len(rows) < want:
        ids = yield from newest_ids(layout, batch if labels else want - len(rows), after=cursor, now=now)
        if not ids:
            return rows, None
        got = yield from list_head_rows(layout, ids)
        by_id = {r.session: r for r in got}
        for sid in ids:
            cursor = sid
            row = by_id.get(sid)
            if row is None or (row.head is not None and row.head.expired):
                continue
            if labels and (row.head is None or not matches(row.head, labels)):
                continue
            rows.append(row)
            if len(rows) >= want:
                return rows, cursor
    return rows, cursor
