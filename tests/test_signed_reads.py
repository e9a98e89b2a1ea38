"""Signed heads, read with trusted keys: what a reader accepts from a bucket an attacker can write.

A head's signature covers its session, seq, last hash, parent, meta and version
(docs/format.md, "Signed heads"), not its manifest: forks, suffix reads, lineage, entry_at,
tombstones and scans must not trust an unsigned manifest, and an undecided head PUT is
settled through the same verification.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import s3log
from s3log._format.codec import decode_head, encode_head, encode_segment
from s3log._format.entries import make_entry
from s3log._format.values import Head
from s3log._protocol import fork, read, state
from s3log._protocol.ops import KeyOp
from s3log.env import Env
from s3log.errors import TransientStoreError
from s3log.signing import Ed25519Signer, PublicKeyVerifier, SignatureError
from tests.delete_hooks import Clock
from tests.tombstones import tombstone_idle

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
            got = log._run(read.entry_at(log.layout, head, seq))
            assert (got.hash if got else None) == (full[seq].hash if 0 <= seq < len(full) else None)
    assert [s.session for s in log.lineage(child)] == [child, parent.session_id]


def _round_trips(log: s3log.Log, proc: Any) -> tuple[Any, int]:
    count = [0]

    def counted() -> Any:
        try:
            op = next(proc)
            while True:
                count[0] += not isinstance(op, KeyOp)  # a signature's check is no store request
                op = proc.send((yield op))
        except StopIteration as stop:
            return stop.value

    return log._run(counted()), count[0]


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
        got, trips = _round_trips(log, read.entry_at(log.layout, head, seq))
        assert got == full[seq] and trips == 1
    child = log.fork(w.session_id, at_seq=0)
    child = child if isinstance(child, str) else child.session_id
    steps, trips = _round_trips(log, fork.lineage(log.layout, child))
    assert [s.session for s in steps] == [child, w.session_id] and not steps[-1].replaced
    assert trips == 3  # child head, parent head, the parent's suffix


T0 = 1_800_000_000_000


@pytest.fixture
def signer() -> Ed25519Signer:
    return Ed25519Signer(Ed25519PrivateKey.generate())


def _logs(store: s3log.MemoryStore, signer: Ed25519Signer, clock: Clock | None = None) -> tuple[s3log.Log, s3log.Log]:
    """A signing writer's log and a verifying reader's (which signs too, to fork)."""
    # A small tail: commits flush to segments, so a session has a manifest to forge.
    cfg: dict[str, Any] = {"tail_per_commit": 0, "tail_max_bytes": 200}
    if clock is not None:
        cfg["env"] = Env.deterministic(7, clock)
    writer = s3log.Log(store, config=s3log.LogConfig(signer=signer, **cfg))
    reader = s3log.Log(store, config=s3log.LogConfig(signer=signer, verifier=PublicKeyVerifier([signer.public_key]),
                                                     **cfg))
    return writer, reader


def _session(log: s3log.Log, n: int = 10) -> str:
    w = log.create()
    for i in range(n):
        w.append("msg", {"i": i})
        w.commit()
    return w.session_id


def _head(store: s3log.MemoryStore, log: s3log.Log, sid: str) -> Head:
    key = log.layout.head(sid)
    return decode_head(store.get(key).body, key)


def _put_head(store: s3log.MemoryStore, log: s3log.Log, head: Head) -> None:
    store.put_raw(log.layout.head(head.session), encode_head(head))


def _forge_first_segment(store: s3log.MemoryStore, log: s3log.Log, sid: str, data: Any) -> Head:
    """The attack on a prefix: the head keeps its signature, seq, hash and tail; its first
    segment is replaced in the (unsigned) manifest by a forged one of the same range, a
    well-formed chain of its own that links to nothing after it."""
    head = _head(store, log, sid)
    first_of_next = int(head.segments[1].rsplit("/", 1)[1].split("-")[0])
    forged, prev = [], None
    for seq in range(first_of_next):
        e = make_entry(seq, prev, "msg", 1, data)
        forged.append(e)
        prev = e.hash
    key = log.layout.segment(sid, 0, forged[-1].hash, "00000000000000aa")
    store.put_raw(key, encode_segment(sid, forged))
    new = replace(head, segments=(key, *head.segments[1:]))
    _put_head(store, log, new)
    return new


def test_a_fork_at_a_seq_does_not_build_on_a_forged_manifest(signer: Ed25519Signer) -> None:
    store = s3log.MemoryStore()
    writer, reader = _logs(store, signer)
    sid = _session(writer)
    _forge_first_segment(store, reader, sid, {"i": "FORGED"})
    with pytest.raises(s3log.CorruptionError):
        reader.read(sid)  # a whole read links the forged segment to the next: refused
    # A fork at seq 1 read only the first segment, so nothing linked it to the signed
    # head: the fork was signed by this writer, with the forged entries as its seed.
    with pytest.raises(s3log.CorruptionError):
        reader.fork(sid, at_seq=1)
    with pytest.raises(s3log.CorruptionError):
        reader._run(read.load(reader.layout, sid, upto_seq=1))
    assert [s for s in store.all_keys() if s.endswith("/head")] == [reader.layout.head(sid)]  # no child


def test_a_fork_at_a_seq_of_a_genuine_session_still_holds_the_prefix(signer: Ed25519Signer) -> None:
    store = s3log.MemoryStore()
    writer, reader = _logs(store, signer)
    sid = _session(writer)
    child = reader.fork(sid, at_seq=1)
    parent = reader.read(child).parent
    assert parent is not None and parent.seq == 1 and parent.hash == reader.read(sid).entries[1].hash
    data = reader._run(read.load(reader.layout, sid, upto_seq=1))
    assert [e.seq for e in data.entries] == [0, 1]


@pytest.mark.parametrize("keep", [0, 1])
@pytest.mark.parametrize("verifying", [True, False])
def test_a_suffix_read_refuses_a_manifest_that_drops_entries(signer: Ed25519Signer, keep: int,
                                                            verifying: bool) -> None:
    store = s3log.MemoryStore()
    writer, reader = _logs(store, signer)
    log = reader if verifying else s3log.Log(store)
    sid = _session(writer)
    head = _head(store, log, sid)
    # No segments, and the tail cut to its last `keep` entries: the signed seq and hash
    # still name entry 9, and the suffix read took the head's word that this was all.
    _put_head(store, log, replace(head, segments=(), levels=(), tail=head.tail[len(head.tail) - keep:]))
    with pytest.raises(s3log.CorruptionError):
        log.read_suffix(sid, lambda es: len(es) >= 5)


def test_a_suffix_read_of_a_genuine_session(signer: Ed25519Signer) -> None:
    store = s3log.MemoryStore()
    writer, reader = _logs(store, signer)
    sid = _session(writer)
    _, entries = reader.read_suffix(sid, lambda es: len(es) >= 3)
    assert entries[-1].seq == 9 and len(entries) >= 3
    _, entries = reader.read_suffix(sid, lambda es: False)  # wants more than there is: all of it
    assert [e.seq for e in entries] == list(range(10))
    empty = reader.create().session_id
    assert reader.read_suffix(empty, lambda es: len(es) >= 1)[1] == []


def test_the_openai_session_does_not_return_a_cut_history(signer: Ed25519Signer) -> None:
    pytest.importorskip("agents")
    from s3log.integrations.openai_agents import S3LogSession

    store = s3log.MemoryStore()
    writer, reader = _logs(store, signer)
    s = S3LogSession("chat", writer)

    async def fill() -> None:
        for i in range(6):
            await s.add_items([{"role": "user", "content": str(i)}])

    asyncio.run(fill())
    assert [i["content"] for i in asyncio.run(S3LogSession("chat", reader).get_items(limit=3))] == ["3", "4", "5"]
    head = _head(store, writer, s.sid)
    # The last item alone: the session looked like a one-item conversation.
    _put_head(store, writer, replace(head, segments=(), levels=(), tail=head.tail[-1:]))
    with pytest.raises(s3log.CorruptionError):
        asyncio.run(S3LogSession("chat", reader).get_items(limit=3))


def test_lineage_does_not_read_the_fork_point_off_a_forged_manifest(signer: Ed25519Signer) -> None:
    store = s3log.MemoryStore()
    writer, reader = _logs(store, signer)
    sid = _session(writer)
    child = reader.fork(sid, at_seq=1)
    assert [s.session for s in reader.lineage(child)] == [child, sid]
    # The parent's head, signature intact, now names a forged segment for seqs 0..: the
    # lineage read the fork point from that one segment (no link to the signed hash) and
    # reported the parent as replaced by another session.
    _forge_first_segment(store, reader, sid, {"i": "FORGED"})
    with pytest.raises(s3log.CorruptionError):
        reader.lineage(child)
    # Without trusted keys nothing anchors a head: the cheap one-segment read stays.
    steps = s3log.Log(store).lineage(child)
    assert steps[-1].replaced


def test_entry_at_with_trusted_keys_verifies_up_to_the_head(signer: Ed25519Signer) -> None:
    store = s3log.MemoryStore()
    writer, reader = _logs(store, signer)
    sid = _session(writer)
    head = _head(store, reader, sid)
    genuine = reader.read(sid).entries
    for seq in (0, 1, 5, 9):
        assert reader._run(read.entry_at(reader.layout, head, seq)) == genuine[seq]
    assert reader._run(read.entry_at(reader.layout, head, 10)) is None
    forged = _forge_first_segment(store, reader, sid, {"i": "FORGED"})
    with pytest.raises(s3log.CorruptionError):
        reader._run(read.entry_at(reader.layout, forged, 1))


def test_expired_added_to_a_signed_head_does_not_make_it_a_tombstone(signer: Ed25519Signer) -> None:
    store = s3log.MemoryStore()
    writer, reader = _logs(store, signer)
    sid = _session(writer, 3)
    head = _head(store, reader, sid)
    gone = {"at": 1, "seq": head.seq, "hash": head.hash, "idle_for_ms": 1}
    _put_head(store, reader, replace(head, extra={**head.extra, "expired": gone}))
    # `expired` is outside the signed payload: the session read as expired (SessionExpired,
    # a SessionNotFound), and every listing and scan left it out, as if it were gone.
    with pytest.raises(SignatureError, match="expired"):
        reader.read(sid)
    assert [i.session_id for i in reader.list_sessions()] == [sid]  # listed, as a broken row
    # Without trusted keys, nothing is anchored: it reads as the tombstone it says it is.
    with pytest.raises(s3log.SessionExpired):
        s3log.Log(store).read(sid)


def test_a_signed_tombstone_reads_as_expired_and_not_without_its_mark(signer: Ed25519Signer) -> None:
    store, clock = s3log.MemoryStore(), Clock(T0)
    writer, reader = _logs(store, signer, clock)
    sid = _session(writer, 3)
    empty = writer.create().session_id
    clock.t += timedelta(days=40) // timedelta(milliseconds=1)
    report = tombstone_idle(writer, idle_for=timedelta(days=30))
    assert sorted(report.expired) == sorted([sid, empty])
    for s in (sid, empty):
        with pytest.raises(s3log.SessionExpired):
            reader.read(s)
        tomb = _head(store, reader, s)
        assert tomb.hash == state.tombstone_hash(s, tomb.extra["expired"]["hash"])
        # `expired` taken off a signed tombstone: its seq and hash name no entry.
        _put_head(store, reader, replace(tomb, extra={}))
        with pytest.raises(s3log.CorruptionError):
            reader.read(s)
        # Or pointed at another chain: its hash no longer names the one it ended.
        _put_head(store, reader, replace(tomb, extra={"expired": {**tomb.extra["expired"], "hash": b"\1" * 32}}))
        with pytest.raises(SignatureError):
            reader.read(s)


def test_a_scan_given_trusted_keys_skips_what_they_did_not_sign(signer: Ed25519Signer) -> None:
    pytest.importorskip("pyarrow")
    from s3log import analytics

    store = s3log.MemoryStore()
    writer, _ = _logs(store, signer)
    signed = _session(writer, 3)
    unsigned = _session(s3log.Log(store), 2)  # a writer without the key: anyone with bucket access
    verifier = PublicKeyVerifier([signer.public_key])
    # A scan takes a store, not a log: it had no way to be given trusted keys, and read
    # every session whatever signed it.
    with pytest.warns(analytics.CorruptSessionWarning, match="unsigned"):
        table = analytics.to_arrow(store, verifier=verifier)
    assert set(table.column("session").to_pylist()) == {signed}
    with pytest.raises(SignatureError):
        analytics.to_arrow(store, verifier=verifier, strict=True)
    heads = analytics.sessions_table(store, verifier=verifier)
    assert heads.column("session").to_pylist() == [signed]
    assert set(analytics.to_arrow(store).column("session").to_pylist()) == {signed, unsigned}  # no keys: unchecked
    with pytest.raises(s3log.InvalidArgumentError, match="verifier"):
        analytics.scan(store, verifier="ed25519:abc")  # type: ignore[arg-type]
    duckdb = pytest.importorskip("duckdb")
    con = analytics.duckdb(duckdb.connect(), store, verifier=verifier)
    with pytest.warns(analytics.CorruptSessionWarning):
        assert con.execute("SELECT DISTINCT session FROM entries").fetchall() == [(signed,)]
    assert con.execute("SELECT session FROM sessions").fetchall() == [(signed,)]
