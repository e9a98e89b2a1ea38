"""The deterministic simulator (s3log.testing.sim): a few hundred seeds, replay, and the bugs it found.

Each known protocol bug has two regressions, both ``xfail(strict=True)`` until it is
fixed (then they pass, strict xfail fails, and the marker comes off): the simulator
seed that found it, replayed with the bug no longer steered around, and a direct
reproduction through the public API.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

import s3log
from s3log._format.chain import PendingEntry
from s3log._format.layout import Layout
from s3log._protocol import commit, read, state
from s3log._protocol.ops import Get, Op, PutIfMatch
from s3log.config import LogConfig, RetryPolicy
from s3log.env import Env
from s3log.errors import ObjectNotFound
from s3log.reducer import EntriesReducer
from s3log.testing import history as history
from s3log.testing.faults import Fault, FaultyStore
from s3log.testing.history import check as check_history
from s3log.testing.sim import Scenario, SimStore, Simulation, run_direct, run_seed
from tests.helpers import drive, one_entry

#: Seeds run by `make test` (scripts/sim.py runs thousands).
SEEDS = 300
CHUNK = 20


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    # Lost races and forks are logged at WARNING; thousands of them are the point here.
    logger = logging.getLogger("s3log")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.mark.parametrize("start", range(0, SEEDS, CHUNK))
def test_seeds_keep_every_invariant(start: int) -> None:
    failures = []
    for seed in range(start, start + CHUNK):
        o = run_seed(seed)
        if o.violation is not None:
            failures.append(f"seed {seed} step {o.steps}: {o.violation} (replay: python scripts/sim.py "
                            f"--seed {seed} --trace)")
    assert not failures, "\n".join(failures)


def test_a_seed_replays_exactly() -> None:
    a = run_seed(220, trace=True)
    b = run_seed(220, trace=True)
    assert a.trace == b.trace
    assert len(a.trace) > 100 and a.faults > 0 and a.acked > 0


def test_scenarios_cover_every_actor_and_fault() -> None:
    scenarios = [Scenario.from_seed(s) for s in range(SEEDS)]
    assert any(s.solo for s in scenarios) and any(not s.solo for s in scenarios)
    assert any(s.forker for s in scenarios) and any(s.gc for s in scenarios) and any(s.readers for s in scenarios)
    assert any(s.ghosts and s.cancel_rate for s in scenarios) and any(s.crash_rate for s in scenarios)
    assert {f for s in scenarios for f in s.faults} == {"409", "412", "503", "timeout-landed", "timeout-lost", "reset"}
    assert {style for s in scenarios for _, style, _ in s.writers} == {"sync", "async"}
    assert {s.retention for s in scenarios} == {"", "expire", "delete", "both"}
    assert any(s.retention and s.creator for s in scenarios) and any(s.retention and s.solo for s in scenarios)
    assert any(s.probe and s.retention and s.gc and s.fault_rate for s in scenarios)
    assert any(s.keyed and s.crash_rate and s.cancel_rate for s in scenarios) and not all(s.keyed for s in scenarios)


def test_a_failing_seed_prints_a_readable_trace(capsys: pytest.CaptureFixture[str]) -> None:
    from scripts.sim import main

    # Seed 672 failed (stale-writer-merge) before that bug was fixed; its trace still prints.
    assert main(["--seed", "672", "--trace", "--bug", "stale-writer-merge"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[3:5] == ["sim", "seed=672"]
    # one line per step: step, virtual time, actor, request, injected fault, result
    step = re.compile(r"\s*\d+ t=\s*\d+ w\d\s+PutIfMatch S\d/head \[[a-z0-9/-]+\] -> \w+$")
    assert any(step.match(line) for line in out)


class LostUpdateStore(SimStore):
    """A store that ignores If-Match: concurrent writers overwrite each other."""

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.get(key)  # 404 still holds
        self.put_raw(key, body)
        return super().put_if_match(key, body, self.get(key).etag)


class DeletesAnywayStore(SimStore):
    """A store that honours every conditional PUT but ignores If-Match on DELETE: an
    expiry deletes a head a commit replaced after the sweep read it."""

    def delete_if_match(self, key: str, etag: str) -> None:
        super().delete_if_match(key, self.get(key).etag)  # 404 still holds


def test_a_store_that_ignores_if_match_is_caught() -> None:
    caught = set()
    for seed in range(60):
        sc = Scenario.from_seed(seed)
        if sc.solo:
            continue
        sim = Simulation(sc)
        sim.store = LostUpdateStore(lambda sim=sim: sim.now, sim.layout)  # type: ignore[misc]
        o = sim.run()
        if o.violation is not None:
            caught.add(o.violation.invariant)
        if "1" in caught:  # caught: the seeds after this one cannot change the outcome
            break
    assert "1" in caught  # acknowledged entries overwritten by another writer's head


def test_the_probe_runs_beside_the_other_actors_and_refuses_a_store_that_ignores_if_match() -> None:
    # Probe scenarios: gc, the retention sweep and the forker probe the store before
    # their first write or delete (docs/decisions/0034), under the scenario's faults.
    # On the honest store every invariant holds and the probe leaves its race keys;
    # on one that ignores If-Match, on a PUT or on a DELETE, the first of them to write
    # or delete is refused.
    probed = refused = refused_delete = 0
    for seed in range(40):
        sc = Scenario.from_seed(seed)
        if not sc.probe or not (sc.gc or sc.retention or sc.forker):
            continue
        sim = Simulation(sc)
        o = sim.run()
        assert o.violation is None, o.violation
        probed += any("/_probe/race/" in k for k in sim.store.all_keys())
        lossy = Simulation(sc)
        lossy.store = LostUpdateStore(lambda sim=lossy: sim.now, lossy.layout)  # type: ignore[misc]
        o = lossy.run()
        refused += o.violation is not None and "PreconditionsIgnoredError" in str(o.violation)
        deleting = Simulation(sc)
        deleting.store = DeletesAnywayStore(lambda sim=deleting: sim.now, deleting.layout)  # type: ignore[misc]
        o = deleting.run()
        refused_delete += o.violation is not None and "If-Match on a stale ETag deleted" in str(o.violation)
    assert probed >= 10 and refused >= 10 and refused_delete >= 10, (probed, refused, refused_delete)


def test_a_gc_without_grace_is_caught() -> None:
    caught = set()
    for seed in range(80):
        sc = Scenario.from_seed(seed)
        if not sc.gc:
            continue
        sim = Simulation(sc)
        sim.gc_older_than_ms = 0
        sim.gc_commit_deadline_ms = 0
        o = sim.run()
        if o.violation is not None:
            caught.add(o.violation.invariant)
        if "5" in caught:  # caught: the seeds after this one cannot change the outcome
            break
    assert "5" in caught


def test_every_seed_records_a_history_the_checker_holds_to_the_promise() -> None:
    kinds: set[str] = set()
    explicit = implicit = 0
    for seed in range(40):
        sim = Simulation(Scenario.from_seed(seed))
        o = sim.run()
        assert o.violation is None, str(o.violation)
        assert o.events == len(sim.history) > 0
        assert check_history(sim.history) == []
        kinds |= {type(ev).__name__ for ev in sim.history.events}
        forks = [ev for ev in sim.history.events if isinstance(ev, history.Fork)]
        explicit += sum(f.explicit for f in forks)
        implicit += sum(not f.explicit for f in forks)
    assert kinds == {"Invoke", "Ack", "Fail", "Read", "Fork", "Ended", "HeadWrite"}
    assert explicit > 0 and implicit > 0  # forks after lost races and forks asked for are both checked


class EtagIgnoringStore(SimStore):
    """A store whose If-Match is not checked: a PUT naming a stale ETag replaces the head."""

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        old = self.get(key)  # 404 still holds
        new = self.put_raw(key, body)
        self._landed(key, body, old.body)
        self._record(key, "put_if_match", etag, new, body)
        return new


def test_heads_accepted_from_one_etag_are_caught_by_the_history_checker() -> None:
    rules: set[str] = set()
    for seed in range(40):
        sc = Scenario.from_seed(seed)
        if sc.solo:
            continue
        sim = Simulation(sc)
        sim.store = EtagIgnoringStore(lambda sim=sim: sim.now, sim.layout)  # type: ignore[misc]
        sim.run()  # stops at the simulator's own first violation; the history so far is checked
        rules |= {v.rule for v in check_history(sim.history)}
        if "etag" in rules:  # caught: the seeds after this one cannot change the outcome
            break
    assert "etag" in rules


class BlindSimulation(Simulation):
    """The simulator with its own invariants switched off: only the history checker judges."""

    def check(self, *, full: bool = False) -> None:
        pass

    def refresh(self, sid: str, *, force: bool = False) -> None:
        pass

    def _check_acked(self, sid: str, payloads: list[str]) -> None:
        pass

    def check_read(self, reader: Any, data: Any) -> None:
        self.history.read(reader.op, reader.name, data.session, history.positions(data.session, data.entries,
                                                                                   s3log.testing.sim.store._payload))


def test_the_history_checker_alone_catches_a_store_that_ignores_if_match() -> None:
    rules: set[str] = set()
    for seed in range(20):
        sc = Scenario.from_seed(seed)
        if sc.solo:
            continue
        sim = BlindSimulation(sc)
        sim.store = LostUpdateStore(lambda sim=sim: sim.now, sim.layout)  # type: ignore[misc]
        sim.run()
        h = history.History(sim.history.events[:])
        for sid in sim.store.heads:  # the final reads, made here: the blind simulator keeps no chains
            try:
                entries = run_direct(sim.store, read.load(sim.layout, sid)).entries
            except s3log.S3LogError:
                entries = []
            h.read(0, "end", sid, history.positions(sid, entries, s3log.testing.sim.store._payload), final=True)
        rules |= {v.rule for v in check_history(h)}
        if {"lost", "read"} <= rules:  # caught: the seeds after this one cannot change the outcome
            break
    assert {"lost", "read"} <= rules  # overwritten acknowledged entries; reads of chains no longer there


def test_a_forking_solo_writer_is_caught() -> None:
    # Two writers on one session in a scenario that promises each session one writer.
    # (Without retention: a session it expired or deleted excuses a fork, by design.)
    sc = replace(Scenario.from_seed(next(s for s in range(100) if Scenario.from_seed(s).solo)), retention="")
    sim = Simulation(sc)
    twin = s3log.testing.sim.WriterActor("twin", sim.actors[0].sid, "sync", "fork")  # type: ignore[attr-defined]
    sim.actors.append(twin)
    o = sim.run()
    assert o.violation is not None and o.violation.invariant == "4"


# ---------------------------------------------------- regressions: simulator seeds

REGRESSION_SEEDS = {
    "create-prefix-taken": 96,
    "fork-before-fork-entry": 20,
    "retired-at-plan-time": 220,
    "stale-writer-merge": 672,
}


@pytest.mark.parametrize("bug", sorted(REGRESSION_SEEDS))
def test_regression_seed(bug: str) -> None:
    # Each seed struck a protocol bug the simulator found (now fixed): it must run clean
    # with that bug's check enforced, in the scenario it struck in (the strict tail bound).
    scenario = replace(Scenario.from_seed(REGRESSION_SEEDS[bug]), tail_per_commit=0, retention="", keyed=False)
    o = Simulation(scenario, known_bugs=frozenset({bug})).run()
    assert o.violation is None, str(o.violation)


# ------------------------------------------------- regressions: direct reproductions

FAST = RetryPolicy(attempts=2, initial=0.0001, max_backoff=0.0002)


class Clock:
    """A settable clock in ms."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def test_forking_a_fork_before_its_first_entry() -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = one_entry(log)
    child = log.fork(w.session_id)
    grandchild = log.fork(child, at_seq=-1)
    assert log.read(grandchild).entries[0].kind == "s3log.fork"


def test_lazy_writer_whose_create_landed_unacknowledged_adopts_it() -> None:
    # Found by the simulator twice: seed 151 (an empty create, gone since empty commits
    # store nothing) and seed 96 (after_lost: IdTaken when creating and landed < batch).
    mem = s3log.MemoryStore()
    armed = {"on": True}

    def plan(method: str, key: str) -> Fault | None:
        if not armed["on"]:
            return None
        # The head's create lands but its response is lost, and so is every re-read.
        if method == "put_if_absent" and key.endswith("/head"):
            return "timeout-landed"
        return "503" if method == "get" and key.endswith("/head") else None

    log = s3log.Log(FaultyStore(mem, plan), config=LogConfig(retry=FAST))
    w = log.create(lazy=True)
    w.commit()  # nothing pending: stores nothing
    assert mem.all_keys() == []
    w.append("k", "first")
    with pytest.raises(s3log.StoreError):
        w.commit()
    assert s3log.Log(mem).head(w.session_id).seq == 0  # landed, unacknowledged
    armed["on"] = False
    w.append("k", "second")
    result = w.commit()
    assert result.fork is None and [e.data for e in result.acked] == ["first", "second"]
    assert [e.data for e in s3log.Log(mem).read(w.session_id).entries] == ["first", "second"]


def test_writer_whose_merge_landed_unacknowledged_survives_gc() -> None:
    clock = Clock()
    mem = SimStore(clock, Layout())  # objects stamped with the test's clock
    cfg = LogConfig(tail_per_commit=0, tail_max_bytes=1, pending_max_bytes=0, fanout=2, cache_levels=0, retry=FAST,
                    commit_deadline_ms=1000,
                    env=Env(clock_ms=clock))
    armed = {"on": False}

    def plan(method: str, key: str) -> Fault | None:
        if not armed["on"]:
            return None
        if method == "put_if_match":
            return "timeout-landed"
        return "503" if method == "get" and key.endswith("/head") else None

    log = s3log.Log(FaultyStore(mem, plan), config=cfg)
    w = log.create()
    w.append("k", "a")
    w.commit()  # flushes segment A
    armed["on"] = True
    w.append("k", "b")
    with pytest.raises(s3log.StoreError):
        w.commit()  # merges A into B: the head lands, the writer never learns it
    armed["on"] = False
    assert len(log.head(w.session_id).segments) == 1
    clock.now += 10_000
    report = log.gc(older_than_ms=1000)
    assert report.deleted  # A, no longer referenced, retired long ago
    w.append("k", "c")
    w.commit()  # fetches A to merge it again: CorruptionError today
    assert [e.data for e in log.read(w.session_id).entries] == ["a", "b", "c"]


def test_reader_of_the_previous_head_gets_the_whole_grace_period() -> None:
    clock = Clock()
    mem = SimStore(clock, Layout())
    grace = 1000
    cfg = LogConfig(tail_per_commit=0, tail_max_bytes=1, pending_max_bytes=0, fanout=2, cache_levels=0, retry=FAST,
                    commit_deadline_ms=grace,
                    env=Env(clock_ms=clock))
    log = s3log.Log(mem, config=cfg)
    layout = log.layout
    w = log.create()
    w.append("k", "a")
    w.commit()  # segment A
    clock.now += 10_000  # A is old
    data = log._run(read.load(layout, w.session_id))
    ws = state.writer_state_from(data, EntriesReducer(), cfg)
    held: dict[str, Any] = {}

    def before(op: Op) -> None:
        # The merging commit is slow: its head lands 800 ms after it was planned. A
        # reader reads the head just before it lands.
        if isinstance(op, PutIfMatch):
            held["head"] = log._run(read.read_head(layout, w.session_id))
            clock.now += 800

    proc = commit.commit(commit.CommitPlan(layout, cfg, EntriesReducer(), ws, [PendingEntry("k", clock.now, "b")]))
    drive(mem, proc, before=before)
    landed = clock.now
    clock.now = landed + grace // 2  # half the grace period after the reader's head retired
    log.gc(older_than_ms=grace)
    head, etag = held["head"]
    try:
        log._run(read.load_from_head(layout, head, etag))
    except s3log.CorruptionError as exc:
        pytest.fail(f"{grace // 2} ms after its head retired, the reader lost a segment: {exc}")


def test_direct_runner_reads_what_it_wrote() -> None:
    # The helper above performs requests faithfully (a 404 is thrown in, not returned).
    mem = s3log.MemoryStore()

    def proc() -> Any:
        try:
            yield Get("nope")
        except ObjectNotFound:
            return "404"
        return "found"

    assert drive(mem, proc()) == "404"


def test_a_crash_decides_the_requests_its_cancelled_commits_left_in_flight() -> None:
    # Seed 2856: a head PUT left in flight by a cancelled commit landed after the writer
    # crashed and restarted, and the restarted writer (rightly) forked away from its own
    # previous life; the simulator now decides such requests at the crash, as it does
    # for the crash's own, so a solo scenario stays solo.
    o = Simulation(replace(Scenario.from_seed(2856), tail_per_commit=0)).run()
    assert o.violation is None, str(o.violation)


def test_a_commit_that_forks_twice_is_acknowledged_where_each_entry_landed() -> None:
    """Seed 7568: a commit continues a fork an earlier one left undecided, loses a race
    in that child and forks again (CommitResult.forks holds both). The simulator put
    every entry but the last in the first fork's parent and reported them lost
    (invariant 1); they were stored, each in its own child."""
    o = run_seed(7568)
    assert o.violation is None, o.violation
    assert o.forks >= 1 and o.acked > 0


def test_a_commit_follows_an_undecided_fork_from_where_it_stands_into_its_child() -> None:
    """Seed 11864: a commit found a prefix of its batch landed, forked the rest from its
    end and was cancelled with the child's head landed. Retention deleted the parent; a
    later commit wrote the prefix again at the free id (the ``cut`` path) and was
    cancelled before following into the child; the next adopted that head, stood where
    the fork starts, and wrote the rest to the parent, the child holding it too
    (invariant 2). Standing there, a commit now reads the head first and, the chain it
    forked from having ended, goes on in that child (tests/test_fork.py)."""
    o = run_seed(11864)
    assert o.violation is None, o.violation


def test_a_commit_does_not_store_again_what_an_undecided_fork_carried_from_a_deleted_parent() -> None:
    """Seed 5308: a lazy writer's commit found its first entries stored in S0, forked the
    rest into S1 and was cancelled with S1's head in flight (a fork doubt). Retention
    deleted S0 (no tombstone) and S1's head landed. The next commit rebuilt the batch,
    created S0 again at the free id without any race, and stored every entry there, the
    ones S1 held too (invariant 2). Only the prefix goes to the parent now; the rest
    follows into the same child (commit.commit, ``cut``).

    Since a retried fork writes its marker again the seed takes another
    course, through a second bug: the ``cut`` path folded the prefix into the writer's
    own state, not a copy, and when the fork after it was cancelled the next commit
    folded it again, so its fork entry's seed held the prefix twice, did not match the
    child's, and the rest went to a new child while the first held it too."""
    o = run_seed(5308)
    assert o.violation is None, o.violation
    assert o.forks >= 1


#: Seeds whose scenario, with a compactor (``Log.compact`` dropping the oldest entry now
#: and then), had a writer's landed entries compacted before it settled its lost reply.
COMPACTION_SEEDS = (275, 316, 376, 482, 484, 570)


@pytest.mark.parametrize("seed", COMPACTION_SEEDS)
def test_compaction_racing_a_lost_reply_stores_nothing_twice(seed: int) -> None:
    # Before the compacted head named the chain it replaced, the writer found nothing by
    # hash, forked, and its entries were stored in two sessions (invariant 2).
    o = Simulation(replace(Scenario.from_seed(seed), compactor=True, keyed=False)).run()
    assert o.violation is None, str(o.violation)
    assert "compactor" in Scenario.describe(replace(Scenario.from_seed(seed), compactor=True))


#: Seeds whose scenario draws keyed appends (``Scenario.keyed``) and retries them with
#: their key (joining an entry whose commit ended undecided or was cancelled, answered
#: from the head's window or a fork's by a restarted writer, or queued again where the
#: first attempt never landed): the first six such seeds from 0. A change to the requests
#: the protocol makes changes which seeds do; the test then says which to pick again.
KEYED_SEEDS = (11, 30, 34, 62, 64, 78)


@pytest.mark.parametrize("seed", KEYED_SEEDS)
def test_keyed_retries_are_stored_once_and_acknowledged_where_they_were(seed: int) -> None:
    assert Scenario.from_seed(seed).keyed
    o = Simulation(Scenario.from_seed(seed), trace=True).run()
    assert o.violation is None, str(o.violation)
    assert any("retry acked" in line for line in o.trace), f"seed {seed} makes no keyed retry now: pick another"


def test_a_writer_that_ignores_append_keys_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every key taken for new: each retry is queued again and stored a second time.
    from s3log._api.queue import CommitQueue

    monkeypatch.setattr(CommitQueue, "_known_key", lambda self, key, digest, wait: None)
    for seed in KEYED_SEEDS:
        o = Simulation(Scenario.from_seed(seed)).run()
        assert o.violation is not None and o.violation.invariant == "2", (seed, o.violation)


@pytest.mark.parametrize("seed", [8145, 17306])
def test_keyed_retries_over_collected_chains_and_forks_commit_and_are_answered_where_stored(seed: int) -> None:
    # 8145: the chain a writer opened expired and its segments were collected; its
    # keyed commits checked a fork against that chain and met the missing segment on
    # every attempt (liveness). 17306: a retry's entry was read after its writer forked,
    # in the fork instead of the chain the key was found in (reported gone).
    o = Simulation(Scenario.from_seed(seed)).run()
    assert o.violation is None, str(o.violation)


def test_a_retry_whose_key_names_an_expired_parents_entry_is_told_it_is_gone() -> None:
    # Seed 3744: a writer forked from its session after the id was expired and taken
    # over; its window (the parent's keys) names an entry of the expired chain, so the
    # retry's lookup finds it gone (EntryNotFound), which retention explains.
    o = Simulation(Scenario.from_seed(3744)).run()
    assert o.violation is None, str(o.violation)


@pytest.mark.parametrize(("seed", "answer"), [(9606, "retry acked in S5: w0.0.5@3"),
                                              (320, "retry acked in S3: w0.1.6@2")])
def test_a_retry_finds_the_fork_its_crashed_commit_made(seed: int, answer: str) -> None:
    # A writer's commit of a keyed entry lost a race and forked; the child's head landed
    # and the writer crashed before it learned so. The restarted writer opens the parent
    # and retries the key there: it finds the entry in the child's window (decision 0037)
    # and is answered with it there, stored once. In 9606 an earlier commit had listed
    # the forks (the append is answered); in 320 the commit carrying the retry lists them.
    o = Simulation(Scenario.from_seed(seed), trace=True).run()
    assert o.violation is None, str(o.violation)
    assert any(answer in line for line in o.trace)


class _CountingSigner:
    """An Ed25519 key that counts its signatures and checks (made by the simulator's
    actors and by its invariant checker's reads)."""

    blocking = True  # performed like a KMS key: the simulator makes no difference

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        from s3log.signing import Ed25519Signer, PublicKeyVerifier

        self._signer = Ed25519Signer(Ed25519PrivateKey.generate())
        self._verifier = PublicKeyVerifier([self._signer.public_key])
        self.alg, self.key_id, self.key_ids = self._signer.alg, self._signer.key_id, (self._signer.key_id,)
        self.signed = self.verified = 0

    def sign(self, payload: bytes) -> Any:
        self.signed += 1
        return self._signer.sign(payload)

    def verify(self, payload: bytes, sig: Any) -> None:
        self.verified += 1
        self._verifier.verify(payload, sig)


def test_seeds_with_signed_heads_keep_every_invariant(quiet: None) -> None:
    """The simulator performs the Sign and Verify ops the procedures yield: with a key
    signing every head and checking every head read, seeds keep the promise."""
    from s3log._api.core import LogCore

    key = _CountingSigner()
    for seed in range(12):
        sim = Simulation(Scenario.from_seed(seed))
        sim.config = replace(sim.config, signer=key, verifier=key, log_id="sim")
        sim.core = LogCore(sim.store, "sim", sim.config, None)
        o = sim.run()
        assert o.violation is None, f"seed {seed}: {o.violation}"
    assert key.signed > 0 and key.verified > 0
