"""Listing at scale, counted in requests: newest-first pages and the activity index.

A million sessions are planted as keys in :class:`SortedStore` (a counting in-memory
store that lists by bisection, pages of 1,000 like S3); heads are made up on GET.
"""

from __future__ import annotations

import bisect
import random
import threading
from typing import Any

import pytest

import s3log
from s3log._format.codec import encode_head
from s3log._format.ids import assemble_uuid7 as _assemble
from s3log._format.layout import Layout
from s3log._protocol.activity import DAY_MS, day_of, marker_key
from s3log._protocol.ops import Blob, ListPage, ObjectInfo
from s3log._protocol.state import empty_head
from s3log.env import Env
from s3log.errors import ObjectNotFound
from s3log.store.base import RequestCounter

NOW = 1_800_000_000_000
LAYOUT = Layout("s3log")


class SortedStore:
    """Keys in a sorted list; LIST by bisection (S3 semantics: prefix, delimiter, StartAfter)."""

    honours_preconditions = True

    def __init__(self, keys: list[str]) -> None:
        self.keys = sorted(keys)
        self.requests = RequestCounter()
        self.lock = threading.Lock()

    def get(self, key: str) -> Blob:
        self.requests.add("GET")
        i = bisect.bisect_left(self.keys, key)
        if i == len(self.keys) or self.keys[i] != key or not key.endswith("/head"):
            raise ObjectNotFound("no such key", key=key, status=404)
        sid = LAYOUT.session_of(key)
        assert sid is not None
        head = empty_head(sid, {"labels": {"tenant": f"t{hash(sid) % 3}"}}, None, 0)
        return Blob(encode_head(head), '"e"')

    def list(self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
             start_after: str | None = None) -> ListPage:
        self.requests.add("LIST")
        after = max(x for x in (token, start_after, "") if x is not None)
        i = max(bisect.bisect_right(self.keys, after), bisect.bisect_left(self.keys, prefix))
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        last = None
        while i < len(self.keys) and self.keys[i].startswith(prefix):
            if len(objects) + len(prefixes) >= max_keys:
                return ListPage(objects, prefixes, last)
            k = self.keys[i]
            cut = k.find(delimiter, len(prefix)) if delimiter else -1
            if cut >= 0:
                common = k[: cut + 1]
                prefixes.append(common)
                last = common + "\U0010ffff"
                i = bisect.bisect_left(self.keys, last)
                continue
            objects.append(ObjectInfo(k, 0, 0))
            last = k
            i += 1
        return ListPage(objects, prefixes, None)

    def put_if_absent(self, key: str, body: bytes) -> str:
        raise AssertionError("listing writes nothing")

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        raise AssertionError("listing writes nothing")

    def delete(self, key: str) -> None:
        raise AssertionError("listing deletes nothing")


def _ids(n: int, span_ms: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [_assemble(NOW - rng.randrange(span_ms), rng.getrandbits(12), rng.getrandbits(62)) for _ in range(n)]


def _head_keys(ids: list[str]) -> list[str]:
    """Each id's head key: the first id's, with the others in its place (validating a
    million made-up ids, as ``LAYOUT.head`` does, costs a second of CPU)."""
    before, after = LAYOUT.head(ids[0]).split(ids[0])
    return [before + sid + after for sid in ids]


def _log(store: SortedStore) -> s3log.Log:
    return s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(3, lambda: NOW)))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def million() -> tuple[SortedStore, list[str]]:
    ids = _ids(1_000_000, 30 * DAY_MS)
    return SortedStore(_head_keys(ids)), sorted(ids, reverse=True)


def test_the_newest_20_of_a_million_sessions_cost_at_most_5_lists(million: tuple[SortedStore, list[str]]) -> None:
    store, newest = million
    store.requests.reset()
    log = _log(store)
    got = [i.session_id for i in log.list_sessions(limit=20)]
    assert got == newest[:20]
    assert store.requests["LIST"] <= 5 and store.requests["GET"] == 20
    # The next page resumes from the cursor: the same bound cost.
    store.requests.reset()
    page2 = [i.session_id for i in log.list_sessions(limit=20, after=got[-1])]
    assert page2 == newest[20:40]
    assert store.requests["LIST"] <= 5 and store.requests["GET"] == 20
    # Far back in time (a cursor a week old) too.
    store.requests.reset()
    old = newest[len(newest) // 4]
    page = [i.session_id for i in log.list_sessions(limit=20, after=old)]
    i = newest.index(old)
    assert page == newest[i + 1 : i + 21] and store.requests["LIST"] <= 5


def test_a_sparse_year_of_200k_sessions_widens_the_window() -> None:
    ids = _ids(200_000, 365 * DAY_MS, seed=2)
    store = SortedStore(_head_keys(ids))
    got = [i.session_id for i in _log(store).list_sessions(limit=20)]
    assert got == sorted(ids, reverse=True)[:20]
    assert store.requests["LIST"] <= 5


def test_a_burst_of_a_million_in_one_second_is_bisected_not_paged() -> None:
    ids = _ids(1_000_000, 1000, seed=3)
    store = SortedStore(_head_keys(ids))
    got = [i.session_id for i in _log(store).list_sessions(limit=20)]
    assert got == sorted(ids, reverse=True)[:20]
    # Paging through the window would be 1,000 LISTs; bisection on time is ~log2(60,000 ms).
    assert store.requests["LIST"] <= 25


def test_labels_read_heads_in_bounded_batches(million: tuple[SortedStore, list[str]]) -> None:
    store, newest = million
    store.requests.reset()
    got = [i.session_id for i in _log(store).list_sessions(limit=10, labels={"tenant": "t1"})]
    expected = [s for s in newest[:200] if hash(s) % 3 == 1][:10]
    assert got == expected
    # One batch of 100 heads was enough (no label index: heads must be read).
    assert store.requests["GET"] <= 200 and store.requests["LIST"] <= 10


def test_active_since_a_week_reads_only_the_active_one_percent() -> None:
    """1,000,000 sessions, 1% committed to in the last 7 days: LISTs and GETs scale with those."""
    ids = _ids(1_000_000, 300 * DAY_MS, seed=4)
    rng = random.Random(5)
    active = rng.sample(ids, 10_000)
    keys = _head_keys(ids)
    # Each active session has a marker on 1 to 3 of the last 7 days; the index began 40 days ago.
    markers = {marker_key(LAYOUT, day_of(NOW - rng.randrange(7 * DAY_MS)), s) for s in active for _ in range(2)}
    markers |= {marker_key(LAYOUT, day_of(NOW - (8 + rng.randrange(32)) * DAY_MS), s) for s in ids[:20_000]}
    store = SortedStore(keys + sorted(markers))
    found = _log(store).active_sessions(since=NOW - 7 * DAY_MS)
    assert found.indexed and set(found.ids) >= set(active) and len(found.ids) < 11_000
    in_window = sum(1 for m in markers if m.split("/")[2] >= day_of(NOW - 7 * DAY_MS))
    assert store.requests["LIST"] <= 2 + in_window // 1000 + 1
    assert store.requests["GET"] == 0  # the index alone; a scan then GETs only these heads


def test_mixed_ids_are_each_listed_once_in_reverse_key_order() -> None:
    """Caller-chosen ids sort by their text: paging with the cursor lists each exactly once."""
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    named = ["thread-1", "thread-2", "Zed", "00-early", "a.b"]
    for sid in named:
        log.create(sid)
    made = [log.create().session_id for _ in range(7)]
    seen: list[str] = []
    after = None
    while True:
        page = [i.session_id for i in log.list_sessions(limit=3, after=after)]
        if not page:
            break
        seen += page
        after = page[-1]
    assert seen == sorted(named + made, reverse=True)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["s3", "obstore"])
def test_newest_first_over_http_costs_a_few_lists(s3log_server: Any, kind: str) -> None:
    """5,000 sessions planted in the local S3: the newest 20 in a few LISTs, over the wire."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    bucket = s3log_server.create_bucket()
    ids = _ids(5_000, 30 * DAY_MS, seed=9)
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for sid in ids:
        backend.put_object(bucket, LAYOUT.head(sid), encode_head(empty_head(sid, {}, None, 0)))
    store: Any = (s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url) if kind == "s3"
                  else s3log.ObstoreStore(bucket, endpoint_url=s3log_server.endpoint_url))
    log = s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(3, lambda: NOW), verify_preconditions=False))
    got = [i.session_id for i in log.list_sessions(limit=20)]
    assert got == sorted(ids, reverse=True)[:20]
    assert store.requests["LIST"] <= 5 and store.requests["GET"] == 20
    log.close()


def test_same_day_by_division_agrees_with_the_calendar() -> None:
    """A commit tells "same day as the head it replaces" by integer division (no date
    formatting per commit): it must agree with the UTC dates, around midnights too."""
    from s3log._format.layout import Layout
    from s3log._protocol.activity import marker_for

    rng = random.Random(5)
    layout = Layout("p")
    for _ in range(3000):
        midnight = rng.randrange(0, 80 * 365) * DAY_MS
        prev = midnight + rng.randrange(-3, 4) * rng.choice([1, 1000, 3_600_000, DAY_MS])
        now = prev + rng.choice([0, 1, 999, DAY_MS - 1, DAY_MS, rng.randrange(3 * DAY_MS)])
        prev, now = max(prev, 0), max(now, 0)
        marker = marker_for(layout, "s", False, prev, now)
        assert (marker is None) == (day_of(prev) == day_of(now)), (prev, now)
        if marker is not None:
            assert marker.key == marker_key(layout, day_of(now), "s")
