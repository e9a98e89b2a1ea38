"""Review of 73833b0 (session 13c): signed heads' new verification on the paths a
writer settles an undecided head PUT through (``landed_prefix`` / ``entry_at``), and
suffix reads. No defect was found; these pin what held, with and without trusted keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import s3log
from s3log import protocol
from s3log.errors import TransientStoreError
from s3log.signing import Ed25519Signer, PublicKeyVerifier

K1 = Ed25519Signer(Ed25519PrivateKey.from_private_bytes(b"\x01" * 32))
K2 = Ed25519Signer(Ed25519PrivateKey.from_private_bytes(b"\x02" * 32))
TRUSTED = PublicKeyVerifier([K1.public_key, K2.public_key])
SMALL = {"tail_per_commit": 0, "tail_max_bytes": 200}


class LostReplyStore(s3log.MemoryStore):
    """Applies a head PUT, runs ``between`` (another writer), then loses the reply."""

    between: Callable[[], None] | None = None

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        out = super().put_if_match(key, body, etag)
        if self.between is not None and key.endswith("/head"):
            hook, self.between = self.between, None
            hook()
            raise TransientStoreError("reply lost", key=key, code="RequestTimeout")
        return out


@pytest.mark.parametrize("verify", [False, True])
@pytest.mark.parametrize("tail", ["inline", "small"])
@pytest.mark.parametrize("fork_child", [False, True])
def test_undecided_put_built_on_by_another_key_is_acked_once(verify: bool, tail: str, fork_child: bool) -> None:
    store = LostReplyStore()
    extra: dict[str, Any] = {"verifier": TRUSTED} if verify else {}
    if tail == "small":
        extra.update(SMALL)
    mine = s3log.Log(store, config=s3log.LogConfig(signer=K1, **extra))
    other = s3log.Log(store, config=s3log.LogConfig(signer=K2, **extra))
    w = mine.create()
    for i in range(5):
        w.append("pre", i)
        w.commit()
    sid = w.session_id
    if fork_child:  # seq 0 is the fork entry: check_fork_origin on the whole-chain read
        sid = mine.fork(sid, at_seq=2)
        sid = sid if isinstance(sid, str) else sid.session_id
        w = mine.open(sid)

    def build_on() -> None:
        o = other.open(sid)
        for j in range(6):
            o.append("other", j)
            o.commit()

    store.between = build_on
    for j in range(3):
        w.append("mine", j)
    result = w.commit()
    assert [e.data for e in result.acked] == [0, 1, 2] and result.fork is None
    stored = [e.data for e in mine.read(sid).entries if e.kind == "mine"]
    assert stored == [0, 1, 2]  # once, in the session, not forked again


@pytest.mark.parametrize("verify", [False, True])
def test_suffix_and_entry_at_of_fork_child_and_tail_only_head(verify: bool) -> None:
    store = s3log.MemoryStore()
    extra: dict[str, Any] = {"verifier": TRUSTED} if verify else {}
    log = s3log.Log(store, config=s3log.LogConfig(signer=K1, **extra))
    tail_only = log.create()
    tail_only.append("m", 0)
    tail_only.commit()
    parent = s3log.Log(store, config=s3log.LogConfig(signer=K1, **extra, **SMALL)).create()
    for i in range(9):
        parent.append("m", i)
        parent.commit()
    child = log.fork(parent.session_id, at_seq=4)
    child = child if isinstance(child, str) else child.session_id
    for sid in (tail_only.session_id, parent.session_id, child):
        full = log.read(sid).entries
        head = log.head(sid)
        for k in range(len(full) + 2):
            _, suffix = log.read_suffix(sid, lambda es, k=k: len(es) >= k)
            assert [e.hash for e in suffix] == [e.hash for e in full[len(full) - len(suffix):]]
        for seq in range(-1, len(full) + 1):
            got = log.run(protocol.entry_at(log.layout, head, seq))
            assert (got.hash if got else None) == (full[seq].hash if 0 <= seq < len(full) else None)
    assert [s.session for s in log.lineage(child)] == [child, parent.session_id]


# ------------------------------------------------- entry_at with trusted keys: latency
# Defect (73833b0): with trusted keys entry_at read the suffix one segment per round
# trip (load_suffix's loop, which cannot know how far it goes): a lineage of a fork of
# a session with 24 segments took 26 sequential GETs instead of 3, and each probe of a
# writer's landed_prefix (settling an undecided head PUT) as many. It knows the range:
# the segments from the one holding the seq to the end go out in one round trip.


def _round_trips(log: s3log.Log, proc: Any) -> tuple[Any, int]:
    count = [0]

    def counted() -> Any:
        try:
            op = next(proc)
            while True:
                count[0] += 1
                op = proc.send((yield op))
        except StopIteration as stop:
            return stop.value

    return log.run(counted()), count[0]


def test_entry_at_with_trusted_keys_reads_its_suffix_in_one_round_trip() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(signer=K1, verifier=TRUSTED, tail_per_commit=0,
                                                  tail_max_bytes=100, fanout=16))
    w = log.create()
    for i in range(400):
        w.append("m", i)
        w.commit()
    head = log.head(w.session_id)
    assert len(head.segments) > 10
    full = log.read(w.session_id).entries
    for seq in (0, 200, 390):
        got, trips = _round_trips(log, protocol.entry_at(log.layout, head, seq))
        assert got == full[seq] and trips == 1
    child = log.fork(w.session_id, at_seq=0)
    child = child if isinstance(child, str) else child.session_id
    steps, trips = _round_trips(log, protocol.lineage(log.layout, child))
    assert [s.session for s in steps] == [child, w.session_id] and not steps[-1].replaced
    assert trips == 3  # child head, parent head, the parent's suffix
