"""The precondition probe: a store that ignores what commits rely on (If-None-Match,
If-Match, stale ETags, racing conditional PUTs) is refused before any verb writes or
deletes: on such a store every guarantee was void without a sound.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

import s3log
from s3log import Encryption, LocalKeyProvider
from s3log._drive.drivers import SyncDriver
from s3log._format.layout import Layout
from s3log._protocol.ops import Op, Parallel
from s3log._protocol.probe import PROBE_RACERS, probe_preconditions
from s3log.errors import (
    ConditionalDeleteUnsupported,
    ObjectNotFound,
    PreconditionFailed,
    PreconditionsIgnoredError,
    StoreError,
)
from s3log.results import ProbeReport
from s3log.store.memory import _etag
from s3log.testing.faults import Fault, FaultyStore
from s3log.testing.localserver import LocalS3
from s3log.testing.sim import SimStore
from tests.scripted import recorded


class HonestStore(s3log.MemoryStore):
    """A MemoryStore that does not vouch for itself, so the probe runs."""

    honours_preconditions = False


class IgnoresIfNoneMatch(HonestStore):
    def put_if_absent(self, key: str, body: bytes) -> str:
        self.requests.add("PUT")
        return self.put_raw(key, body)


class IgnoresIfMatch(HonestStore):
    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.requests.add("PUT")
        return self.put_raw(key, body)


@pytest.mark.parametrize(("store_type", "says"), [(IgnoresIfNoneMatch, "If-None-Match"), (IgnoresIfMatch, "If-Match")])
def test_a_store_ignoring_conditions_is_refused_before_anything_is_written(store_type: type, says: str) -> None:
    store = store_type()
    log = s3log.Log(store)
    with pytest.raises(PreconditionsIgnoredError, match=says):
        log.create("s1")
    assert not [k for k in store.all_keys() if "/_probe/" not in k]
    w = log.create("s2", lazy=True)
    w.append("k", 1)
    with pytest.raises(PreconditionsIgnoredError):
        w.commit()
    assert not [k for k in store.all_keys() if "/_probe/" not in k]
    report = log.check_store()
    assert not report.ok


def test_an_honest_store_is_probed_once_per_store_and_leaves_only_its_probe_object() -> None:
    store = HonestStore()
    log = s3log.Log(store, config=s3log.LogConfig(activity_index=False))
    log.create("a")
    first = store.requests.snapshot()
    assert first["PUT"] == 14  # the probe's 13 on a bucket it never probed (docs/decisions/0034); the head
    log.create("b")
    assert store.requests["PUT"] == first["PUT"] + 1  # no second probe
    s3log.Log(store, config=s3log.LogConfig(activity_index=False)).create("c")
    assert store.requests["PUT"] == first["PUT"] + 2  # nor for another Log over the same store
    # The probe's folder is no session: listings and gc skip it.
    assert sorted(log.list_session_ids()) == ["a", "b", "c"]
    assert log.gc(older_than_ms=0).broken == []
    keys = [k for k in store.all_keys() if "/_probe/" in k]
    assert keys[0] == "s3log/sessions/_probe/head" and len(keys) == 2
    assert keys[1].startswith("s3log/sessions/_probe/race/")  # the one object each probe leaves
    assert _etag(b"") != ""


class AsyncHonestStore(s3log.AsyncMemoryStore):
    honours_preconditions = False


def _recording(log: Any, rounds: list[Op]) -> None:
    """Record every round trip ``log`` makes from now on (a Parallel is one)."""
    run = log._run
    log._run = lambda proc: run(recorded(proc, rounds))


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_writers_open_sends_the_probe_beside_its_reads_so_its_first_commit_is_one_round_trip(kind: str) -> None:
    store = HonestStore()
    quiet = s3log.LogConfig(verify_preconditions=False, activity_index=False, tail_max_bytes=4096)
    w = s3log.Log(store, config=quiet).create("s1")
    for i in range(8):
        w.append("k", {"i": i, "text": "x" * 1000})
        w.commit()
    assert s3log.Log(store, config=quiet).head("s1").segments  # open reads the head, then segments
    rounds: list[Op] = []
    opened = 0
    cfg = s3log.LogConfig(activity_index=False, tail_max_bytes=4096)
    if kind == "sync":
        log = s3log.Log(store, config=cfg)
        _recording(log, rounds)
        w = log.open("s1")
        opened = len(rounds)
        w.append("k", "cold")
        w.commit()
    else:
        async def main() -> None:
            nonlocal opened
            alog = s3log.AsyncLog(AsyncHonestStore(store), config=cfg)
            _recording(alog, rounds)
            aw = await alog.open("s1")
            opened = len(rounds)
            aw.append("k", "cold")
            await aw.commit()

        asyncio.run(main())
    opening, committing = rounds[:opened], rounds[opened:]
    # The probe's three round trips ride with the head's GET and the segments' GETs (and
    # one alone); the commit then sends its one PUT. Sent in turn, they were 2 + 3 + 1.
    assert len(opening) == 3 and len(committing) == 1, (opening, committing)
    first, second, _ = opening
    assert isinstance(first, Parallel) and {type(op).__name__ for op in first.ops} == {"Get", "PutIfAbsent",
                                                                                       "PutIfMatch"}
    assert isinstance(second, Parallel) and any("/_probe/" not in op.key for op in second.ops)
    assert len(s3log.Log(store, config=quiet).read("s1").entries) == 9


def test_an_open_that_finds_no_session_lets_the_probe_finish_so_the_create_after_it_does_not_probe() -> None:
    store = HonestStore()
    log = s3log.Log(store, config=s3log.LogConfig(activity_index=False))
    with pytest.raises(s3log.SessionNotFound):
        log.open("s1")
    assert store.requests["PUT"] == 13 and store.requests["DELETE"] == 2  # the whole probe
    store.requests.reset()
    log.create("s1")
    assert store.requests.snapshot() == {"GET": 0, "PUT": 1, "LIST": 0, "DELETE": 0}
    assert not [k for k in store.all_keys() if k.endswith(".del")]


class ReadOnly(HonestStore):
    """A read-only credential: every write is refused."""

    def _denied(self, key: str, *_: Any) -> Any:
        self.requests.add("PUT")
        raise StoreError("access denied", key=key, code="AccessDenied", status=403)

    put_if_absent = put_if_match = delete_if_match = _denied


def test_a_writers_open_on_a_store_the_probe_cannot_pass_reads_and_the_verdict_waits_for_a_write() -> None:
    store = IgnoresIfMatch()
    w = s3log.Log(store, config=s3log.LogConfig(verify_preconditions=False)).create("s1")
    w.append("k", 1)
    w.commit()
    log = s3log.Log(store)
    w = log.open("s1")  # the probe ran beside the reads and found If-Match ignored
    w.append("k", 2)
    store.requests.reset()
    for write in (w.commit, lambda: log.create("s2")):
        with pytest.raises(PreconditionsIgnoredError, match="If-Match"):
            write()  # the refusal kept: not probed again (a flaky store gets no second chance)
    assert store.requests.total == 0
    assert len(s3log.Log(store, config=s3log.LogConfig(verify_preconditions=False)).read("s1").entries) == 1
    denied = ReadOnly()
    for key in store.all_keys():
        denied.put_raw(key, store.get(key).body)
    s3log.Log(denied).open("s1")  # the probe's writes refused: opened all the same


def test_the_probe_can_be_turned_off() -> None:
    store = IgnoresIfMatch()
    log = s3log.Log(store, config=s3log.LogConfig(verify_preconditions=False))
    log.create("x")  # the operator vouches for the store
    assert [k for k in store.all_keys() if "/sessions/" in k] == ["s3log/sessions/x/head"]


def test_the_probe_passes_on_the_local_http_s3(s3log_log: s3log.Log) -> None:
    report = s3log_log.check_store()
    assert report.complete, report


# ------------------------------------------------------------ once per bucket


def test_stores_made_anew_for_one_bucket_are_probed_once(s3log_server: LocalS3) -> None:
    # The demo (and a serverless handler that opens its store per invocation) paid the
    # probe's PUTs on every commit: it was remembered per store object only.
    bucket, ep = s3log_server.create_bucket(), s3log_server.endpoint_url
    cfg = s3log.LogConfig(activity_index=False)

    def puts(store: s3log.S3Store, sid: str) -> int:
        s3log.Log(store, config=cfg).create(sid)
        return store.requests["PUT"]

    first = s3log.S3Store(bucket, endpoint_url=ep)
    assert puts(first, "a") == 14  # the probe's 13 (the bucket's first); the head
    assert puts(s3log.S3Store(bucket, endpoint_url=ep), "b") == 1  # the head alone
    # Another bucket is another answer; a store on a client of the caller's is probed itself.
    assert puts(s3log.S3Store(s3log_server.create_bucket(), endpoint_url=ep), "c") == 14
    assert puts(s3log.S3Store(bucket, client=first.client), "d") == 13  # 12: the bucket was probed before


@pytest.mark.parametrize("kind", ["aioboto3", "obstore"])
def test_async_stores_made_anew_for_one_bucket_are_probed_once(s3log_server: LocalS3, kind: str) -> None:
    bucket, ep = s3log_server.create_bucket(), s3log_server.endpoint_url
    make = s3log.AsyncS3Store if kind == "aioboto3" else s3log.AsyncS3Store.fast
    cfg = s3log.LogConfig(activity_index=False)

    async def puts(sid: str) -> int:
        store = make(bucket, endpoint_url=ep)
        await s3log.AsyncLog(store, config=cfg).create(sid)
        if kind == "aioboto3":
            await store.aclose()
        return int(store.requests["PUT"])

    async def main() -> list[int]:
        return [await puts("a"), await puts("b")]

    assert asyncio.run(main()) == [14, 1]


def test_a_probe_that_could_not_tell_does_not_speak_for_its_scope() -> None:
    # A probe refused by the store (None: untested) lets its own store through with a
    # warning, but says nothing of the scope: the next store of it is probed again.
    class Denied(HonestStore):
        precondition_scope = ("memory", "denied")

        def put_if_match(self, key: str, body: bytes, etag: str) -> str:
            if "/_probe/" in key:
                self.requests.add("PUT")
                raise StoreError("access denied", key=key, code="AccessDenied", status=403)
            return super().put_if_match(key, body, etag)

    class Honest(HonestStore):
        precondition_scope = ("memory", "honest")

    cfg = s3log.LogConfig(activity_index=False)
    for store_type, probed in ((Denied, [True, True]), (Honest, [True, False])):
        seen = []
        for sid in ("a", "b"):
            store = store_type()
            s3log.Log(store, config=cfg).create(sid)
            seen.append(any("/_probe/" in k for k in store.all_keys()))
        assert seen == probed, store_type


# ------------------------------------------- what commits rely on (docs/decisions/0034)


def _rounds(store: object, cfg: s3log.LogConfig | None = None) -> tuple[ProbeReport, list[int]]:
    """The probe's report and the requests of each round trip it made, run on ``store``."""
    sizes: list[int] = []

    class Counting(SyncDriver):
        def _perform(self, op: Op) -> Any:
            if isinstance(op, Parallel):  # the probe sends every request inside one
                sizes.append(len(op.ops))
            return super()._perform(op)

    cfg = cfg or s3log.LogConfig()
    driver = Counting(store, cfg.retry, cfg.max_parallel, cfg.env)  # type: ignore[arg-type]
    try:
        return driver.run(probe_preconditions(Layout(), cfg)), sizes
    finally:
        driver.close()


def test_the_probe_costs_twelve_puts_and_two_deletes_in_three_round_trips() -> None:
    store = HonestStore()
    report, sizes = _rounds(store)
    assert report.complete and report.ok and report.delete_if_match is True, report
    # First round trip: If-None-Match on _probe/head (creates it: a new bucket), If-Match on
    # _probe/missing, 4 racing creates of the race key, the create of {race}.del;
    # second: _probe/head again, 4 racing If-Match PUTs, the If-Match DELETE of
    # {race}.del on its ETag; third: the stale If-Match PUT and DELETE.
    assert sizes == [3 + PROBE_RACERS, 2 + PROBE_RACERS, 2]
    assert store.requests.snapshot() == {"GET": 0, "PUT": 13, "LIST": 0, "DELETE": 2}
    store.requests.reset()
    report, sizes = _rounds(store)
    assert report.complete
    assert sizes == [3 + PROBE_RACERS, 1 + PROBE_RACERS, 2]
    assert store.requests.snapshot() == {"GET": 0, "PUT": 2 * PROBE_RACERS + 4, "LIST": 0, "DELETE": 2}
    # Each probe leaves its race key (the stale DELETE kept it); the keys come from
    # cfg.env, never the same twice; {race}.del is gone.
    left = [k for k in store.all_keys() if "/_probe/race/" in k]
    assert len(left) == 2 and not [k for k in left if k.endswith(".del")]


class IfMatchMeansExists(HonestStore):
    """If-Match only checks that the object exists (the ETag's value is ignored)."""

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.requests.add("PUT")
        if key not in self.all_keys():
            raise ObjectNotFound("no such key", key=key, code="NoSuchKey", status=404)
        return self.put_raw(key, body)


class IgnoresIfMatchOnDelete(HonestStore):
    """Honours every conditional PUT, but a DELETE with If-Match deletes whatever the ETag."""

    def delete_if_match(self, key: str, etag: str) -> None:
        if key not in self.all_keys():
            self.requests.add("DELETE")
            raise ObjectNotFound("no such key", key=key, code="NoSuchKey", status=404)
        self.delete(key)  # counted as the DELETE it is


class CheckThenAct(HonestStore):
    """A conditional PUT whose check and write are two steps: the first ``PROBE_RACERS``
    calls of ``method`` on the probe's race keys all check, meet at a barrier, then all
    write (the race every such store loses, made certain)."""

    def __init__(self, method: str) -> None:
        super().__init__()
        self.method = method
        self.barrier = threading.Barrier(PROBE_RACERS, timeout=30)
        self.raced = 0
        self.race_lock = threading.Lock()

    def _racing(self, method: str, key: str) -> bool:
        with self.race_lock:
            racing = (method == self.method and "/_probe/race/" in key and not key.endswith(".del")
                      and self.raced < PROBE_RACERS)
            self.raced += racing
        return racing

    def put_if_absent(self, key: str, body: bytes) -> str:
        if not self._racing("put_if_absent", key):
            return super().put_if_absent(key, body)
        self.requests.add("PUT")
        exists = key in self.all_keys()
        self.barrier.wait()
        if exists:
            raise PreconditionFailed("object exists", key=key, code="PreconditionFailed", status=412)
        return self.put_raw(key, body)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        if not self._racing("put_if_match", key):
            return super().put_if_match(key, body, etag)
        self.requests.add("PUT")
        current = self.get(key).etag
        self.barrier.wait()
        if current != etag:
            raise PreconditionFailed("etag differs", key=key, code="PreconditionFailed", status=412)
        return self.put_raw(key, body)


@pytest.mark.parametrize(("make", "ignored"), [
    (IfMatchMeansExists, {"stale_if_match", "racing_if_match"}),
    (lambda: CheckThenAct("put_if_absent"), {"racing_creates"}),
    (lambda: CheckThenAct("put_if_match"), {"racing_if_match"}),
    (IgnoresIfMatchOnDelete, {"delete_if_match"}),
], ids=["if-match-means-exists", "racing-creates", "racing-if-match", "if-match-on-delete-ignored"])
def test_a_store_that_passes_sequential_checks_but_not_what_commits_rely_on_is_refused(
    make: Callable[[], HonestStore], ignored: set[str]
) -> None:
    report, _ = _rounds(make())
    seen = {name: getattr(report, name) for name in
            ("if_none_match", "if_match", "stale_if_match", "racing_if_match", "racing_creates",
             "delete_if_match")}
    assert {n for n, v in seen.items() if v is False} == ignored, report
    assert all(v is True for n, v in seen.items() if n not in ignored), report
    assert not report.ok
    # And a log on it refuses to write anything but the probe's objects.
    store = make()
    with pytest.raises(PreconditionsIgnoredError):
        s3log.Log(store).create("s1")
    assert not [k for k in store.all_keys() if "/_probe/" not in k]


def test_a_lost_reply_in_a_race_is_no_second_winner() -> None:
    # A racing create whose reply was lost (it landed) and the others' 412s: no winner
    # seen, so the probe reads the key's ETag and goes on; nothing is called ignored.
    def plan(method: str, key: str) -> Fault | None:
        return "timeout-landed" if method == "put_if_absent" and "/race/" in key else None

    store = FaultyStore(HonestStore(), plan)
    report, sizes = _rounds(store)
    assert report.ok and report.racing_creates is None and report.racing_if_match and report.stale_if_match
    # The GET of the race key; {race}.del's ETag was lost with its reply: no DELETE of it.
    assert sizes == [3 + PROBE_RACERS, 1, 1 + PROBE_RACERS, 2]
    assert report.delete_if_match is None


def test_the_probe_passes_on_the_async_stores_and_the_simulator_store(s3log_server: LocalS3) -> None:
    async def main() -> list[ProbeReport]:
        bucket, ep = s3log_server.create_bucket(), s3log_server.endpoint_url
        boto = s3log.AsyncS3Store(bucket, endpoint_url=ep)
        try:
            return [await s3log.AsyncLog(boto).check_store(),
                    await s3log.AsyncLog(s3log.AsyncS3Store.fast(bucket, endpoint_url=ep)).check_store(),
                    await s3log.AsyncLog(s3log.AsyncMemoryStore()).check_store()]
        finally:
            await boto.aclose()

    reports = asyncio.run(main())
    reports.append(_rounds(SimStore(lambda: 0, Layout()))[0])
    assert all(r.complete for r in reports), reports
    # obstore cannot send a DELETE with If-Match: unsupported, not ignored (expire
    # refuses it; delete and gc delete by key, docs/decisions/0032). The others delete
    # on the current ETag and refuse a stale one, moto included.
    assert [r.delete_if_match for r in reports] == [True, "unsupported", True, True]


def test_the_probe_passes_on_the_blocking_stores_over_http(s3log_server: LocalS3) -> None:
    bucket, ep = s3log_server.create_bucket(), s3log_server.endpoint_url
    boto = s3log.S3Store(bucket, endpoint_url=ep)
    fast = s3log.S3Store.fast(bucket, endpoint_url=ep)
    reports = [_rounds(boto)[0], _rounds(fast)[0]]
    assert all(r.complete and r.ok for r in reports), reports
    assert [r.delete_if_match for r in reports] == [True, "unsupported"]
    assert boto.requests["DELETE"] == 2 and fast.requests["DELETE"] == 0  # nothing sent by obstore


class NoConditionalDelete(HonestStore):
    """A store that cannot send a DELETE with If-Match, as obstore (nothing sent)."""

    def delete_if_match(self, key: str, etag: str) -> None:
        raise ConditionalDeleteUnsupported("no conditional DELETE", key=key, code="NotImplemented")


class RefusesConditionalDeletes(HonestStore):
    """Answers 412 to every DELETE with If-Match, on the current ETag too."""

    def delete_if_match(self, key: str, etag: str) -> None:
        self.requests.add("DELETE")
        raise PreconditionFailed("etag differs", key=key, code="PreconditionFailed", status=412)


def test_a_store_that_cannot_delete_conditionally_is_unsupported_and_one_that_never_does_untested() -> None:
    # Unsupported: complete (never relied on: expire refuses such a store), not ignored.
    report, sizes = _rounds(NoConditionalDelete())
    assert report.delete_if_match == "unsupported" and report.complete and report.ok, report
    assert sizes == [3 + PROBE_RACERS, 2 + PROBE_RACERS, 2]
    # Refusing the current ETag too: the stale refusal proves nothing; nothing would be
    # deleted wrongly either, so untested (a warning), not ignored.
    report, _ = _rounds(RefusesConditionalDeletes())
    assert report.delete_if_match is None and report.ok and not report.complete, report
    assert "DELETE with If-Match on the current ETag was refused" in report.detail


# ------------------------------------------------ every writing or deleting verb is probed


class IgnoresConditions(HonestStore):
    """Writes and deletes whatever the condition, and records every call (method, key)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def get(self, key: str) -> Any:
        self.calls.append(("get", key))
        return super().get(key)

    def list(self, prefix: str, **kw: Any) -> Any:
        self.calls.append(("list", prefix))
        return super().list(prefix, **kw)

    def put_if_absent(self, key: str, body: bytes) -> str:
        self.calls.append(("put_if_absent", key))
        self.requests.add("PUT")
        return self.put_raw(key, body)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.calls.append(("put_if_match", key))
        self.requests.add("PUT")
        return self.put_raw(key, body)

    def delete(self, key: str) -> None:
        self.calls.append(("delete", key))
        super().delete(key)

    def delete_if_match(self, key: str, etag: str) -> None:
        self.calls.append(("delete_if_match", key))
        super().delete(key)


class AsyncIgnoresConditions(s3log.AsyncMemoryStore):
    honours_preconditions = False


#: Verbs that write or delete, each as one call on a log holding session "s1".
def _encrypting(log: Any) -> Any:
    """A log of the same kind over the same store, with a local data-key provider."""
    return type(log)(log.store, config=s3log.LogConfig(encryption=Encryption(LocalKeyProvider({"k1": bytes(32)}))))


LOG_WRITES: dict[str, Callable[[Any], Any]] = {
    "create": lambda log: log.create("new"),
    "append_latest": lambda log: log.append_latest("s1", [("k", 1)]),
    "compact": lambda log: log.compact("s1", lambda history, head: history[:1]),
    "fork": lambda log: log.fork("s1"),
    "delete": lambda log: log.delete("s1"),
    "gc": lambda log: log.gc(older_than_ms=0),
    "expire": lambda log: log.expire(idle_for=1),
    # Key objects: made and destroyed under conditions on the key store (the log's here).
    "rotate_key": lambda log: _encrypting(log).rotate_key("s1"),
    "shred": lambda log: _encrypting(log).shred("s1"),
}
#: Verbs that only read (a dry run of gc or expire too: it writes and deletes nothing).
LOG_READS = {"active_sessions", "child_heads", "children", "delete_plan", "head", "heads", "lineage",
             "list_session_ids", "list_sessions", "object_keys", "open", "read", "read_runs", "read_suffix",
             "read_window", "verify"}
#: No verb: the probe itself, running a procedure as given, hooks and closing.
LOG_OTHER = {"check_store", "add_close_hook", "close", "aclose"}
#: A writer's verbs that send requests: each makes an entry durable or writes the head.
WRITER_WRITES: dict[str, Callable[[Any], Any]] = {
    "commit": lambda w: (w.append("k", 1), w.commit())[1],
    "renew_lease": lambda w: w.renew_lease(),
    "append_durable": lambda w: w.append_durable("k", 1),
    "wait": lambda w: w.wait(w.submit("k", 1)),
}
#: A writer's verbs that queue or change its own state: nothing is sent.
WRITER_LOCAL = {"append", "submit", "status", "withdraw", "hold_lease", "release_lease", "on_fork"}
#: Commands that write or delete, on a bucket holding session "s1".
CLI_WRITES = {"fork": ["fork", "s1"], "rm": ["rm", "s1", "--yes"], "gc": ["gc", "--older-than", "1s"],
              "expire": ["expire", "--idle", "1ms"]}
#: Commands that read; doctor (the probe), local-s3 (a server) and demo (its workers
#: write through Log.create and Writer.commit, probed above).
CLI_OTHER = {"ls", "show", "tail", "verify", "lineage", "export", "query", "doctor", "local-s3", "demo"}


def _public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}


def test_every_verb_is_known_to_write_or_not() -> None:
    # A verb added without a place here fails: decide whether it writes, and if it
    # does, the parametrized test below proves it probes the store first.
    from typer.main import get_command

    from s3log.cli.app import app

    for cls in (s3log.Log, s3log.AsyncLog):
        assert _public(cls) == (set(LOG_WRITES) | LOG_READS | LOG_OTHER) - ({"close"} if cls is s3log.AsyncLog
                                                                              else {"aclose"}), cls
    assert _public(s3log.Writer) == set(WRITER_WRITES) | WRITER_LOCAL
    assert _public(s3log.AsyncWriter) == set(WRITER_WRITES) | WRITER_LOCAL
    assert set(get_command(app).commands) == set(CLI_WRITES) | CLI_OTHER  # type: ignore[attr-defined]


def _store_with_a_session(kind: type[IgnoresConditions] = IgnoresConditions) -> IgnoresConditions:
    store = kind()
    w = s3log.Log(store, config=s3log.LogConfig(verify_preconditions=False)).create("s1")
    w.append("k", 0)
    w.commit()
    return store


def _refused_before_any_request(store: IgnoresConditions, call: Callable[[], Any], *, probed: bool = False) -> None:
    """``call`` raises PreconditionsIgnoredError having sent nothing but the probe's
    requests (``probed``: nothing at all, the probe having refused the store before)."""
    store.calls.clear()
    with pytest.raises(PreconditionsIgnoredError):
        call()
    if probed:
        assert store.calls == []
        return
    assert store.calls, "the probe must have run"
    assert [c for c in store.calls if "/_probe/" not in c[1]] == []


@pytest.mark.parametrize("verb", ["create", "rotate_key", "shred"])
def test_a_separate_key_store_that_ignores_conditions_is_refused_before_a_key_is_written(verb: str) -> None:
    # Two writers both "creating" key n of a session on such a store would each seal
    # entries under a key the other overwrote: acknowledged data no key opens.
    keys = IgnoresConditions()
    log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(
        encryption=Encryption(LocalKeyProvider({"k1": bytes(32)}), key_store=keys)))
    calls = {"create": lambda: log.create("s1"), "rotate_key": lambda: log.rotate_key("s1"),
             "shred": lambda: log.shred("s1")}
    _refused_before_any_request(keys, calls[verb])


class IgnoresOnlyIfMatchOnDelete(IgnoresConditions):
    """Honours every conditional PUT; a DELETE with If-Match deletes whatever the ETag
    (expire would delete a head a commit just replaced: an acknowledged entry lost)."""

    def put_if_absent(self, key: str, body: bytes) -> str:
        self.calls.append(("put_if_absent", key))
        return s3log.MemoryStore.put_if_absent(self, key, body)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.calls.append(("put_if_match", key))
        return s3log.MemoryStore.put_if_match(self, key, body, etag)


@pytest.mark.parametrize("ignores", ["conditions", "if-match-on-delete"])
@pytest.mark.parametrize("verb", sorted(LOG_WRITES))
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_every_writing_verb_refuses_a_store_that_ignores_conditions_before_its_first_request(
    verb: str, kind: str, ignores: str
) -> None:
    store = _store_with_a_session(IgnoresConditions if ignores == "conditions" else IgnoresOnlyIfMatchOnDelete)
    if kind == "sync":
        _refused_before_any_request(store, lambda: LOG_WRITES[verb](s3log.Log(store)))
        return

    async def main() -> None:
        await LOG_WRITES[verb](s3log.AsyncLog(AsyncIgnoresConditions(store)))

    _refused_before_any_request(store, lambda: asyncio.run(main()))


@pytest.mark.parametrize("verb", sorted(WRITER_WRITES))
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_every_writing_verb_of_a_writer_refuses_such_a_store_before_its_first_request(verb: str, kind: str) -> None:
    # The writer's open ran the probe beside its reads (decision 0051): its refusal is
    # raised by the write, with no request at all.
    store = _store_with_a_session()
    if kind == "sync":
        store.calls.clear()
        writer = s3log.Log(store).open("s1")
        assert any("/_probe/" in c[1] for c in store.calls)
        _refused_before_any_request(store, lambda: WRITER_WRITES[verb](writer), probed=True)
        return

    async def main() -> None:
        alog = s3log.AsyncLog(AsyncIgnoresConditions(store))
        writer = await alog.open("s1")
        assert any("/_probe/" in c[1] for c in store.calls)
        store.calls.clear()
        await WRITER_WRITES[verb](writer)

    _refused_before_any_request(store, lambda: asyncio.run(main()), probed=True)


@pytest.mark.parametrize("command", sorted(CLI_WRITES))
def test_every_writing_command_refuses_such_a_store_before_its_first_request(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from typer.testing import CliRunner

    import s3log.cli.common
    import s3log.store.s3
    from s3log.cli.app import app

    store = _store_with_a_session()
    client = SimpleNamespace(meta=SimpleNamespace(endpoint_url="http://127.0.0.1:1"))
    monkeypatch.setattr(s3log.cli.common, "_s3_client", lambda s: client)
    monkeypatch.setattr(s3log.store.s3, "S3Store", lambda bucket, client: store)
    store.calls.clear()
    result = CliRunner().invoke(app, CLI_WRITES[command], env={"S3LOG_BUCKET": "b"})
    assert result.exit_code == 1, result.output
    assert "If-Match" in result.output and isinstance(result.exception, SystemExit)
    # rm looks the session up first (to show what goes); nothing is written or deleted.
    assert [c for c in store.calls if c[0] not in ("get", "list") and "/_probe/" not in c[1]] == []
    assert any("/_probe/" in k for _, k in store.calls)


@pytest.mark.parametrize("seed", range(60))
def test_faults_never_make_an_honest_store_look_ignoring_and_the_requests_stay_bounded(seed: int) -> None:
    # Throttles, 409s and lost requests or replies on every probe request: an honest
    # store is never reported IGNORED (a lost reply is no win, a 409 is no write), and
    # the probe sends at most its rounds' PUTs, one GET and its two DELETEs.
    rng = random.Random(seed)
    faults: list[Fault] = ["409", "503", "timeout-landed", "timeout-lost"]

    def plan(method: str, key: str) -> Fault | None:
        return rng.choice(faults) if rng.random() < 0.3 else None

    store = FaultyStore(HonestStore(), plan)
    cfg = s3log.LogConfig(retry=s3log.RetryPolicy(attempts=4, initial=0.001, max_backoff=0.002))
    report, _ = _rounds(store, cfg)
    assert report.ok, report
    assert store.requests["PUT"] <= 4 * 2 + 2 * PROBE_RACERS + 2 and store.requests["GET"] <= 1
    assert store.requests["DELETE"] <= 2 and store.requests["LIST"] == 0
