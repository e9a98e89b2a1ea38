"""Security review of signed heads (session 13): what a reader with trusted keys accepts.

The attacker can write the bucket but holds no signing key. A head's signature covers
its session, seq, last hash, parent, meta and version (docs/format.md, "Signed heads"),
not its manifest (``segments``), its ``tail`` or its ``expired`` field: those are
trusted only through the chain that links them to the signed last hash. Each test here
is a read path that took them on trust.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import s3log
from s3log import protocol
from s3log.codec import Head, decode_head, encode_head, encode_segment, make_entry
from s3log.env import Env
from s3log.signing import Ed25519Signer, PublicKeyVerifier, SignatureError
from tests.delete_hooks import Clock
from tests.tombstones import tombstone_idle

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


# ---------------------------------------------------------------- prefix reads (forks)


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
        reader.run(protocol.load(reader.layout, sid, upto_seq=1))
    assert [s for s in store.all_keys() if s.endswith("/head")] == [reader.layout.head(sid)]  # no child


def test_a_fork_at_a_seq_of_a_genuine_session_still_holds_the_prefix(signer: Ed25519Signer) -> None:
    store = s3log.MemoryStore()
    writer, reader = _logs(store, signer)
    sid = _session(writer)
    child = reader.fork(sid, at_seq=1)
    parent = reader.read(child).parent
    assert parent is not None and parent.seq == 1 and parent.hash == reader.read(sid).entries[1].hash
    data = reader.run(protocol.load(reader.layout, sid, upto_seq=1))
    assert [e.seq for e in data.entries] == [0, 1]


# ------------------------------------------------------------------- suffix reads


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


# ------------------------------------------------------------ lineage (entry_at)


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
        assert reader.run(protocol.entry_at(reader.layout, head, seq)) == genuine[seq]
    assert reader.run(protocol.entry_at(reader.layout, head, 10)) is None
    forged = _forge_first_segment(store, reader, sid, {"i": "FORGED"})
    with pytest.raises(s3log.CorruptionError):
        reader.run(protocol.entry_at(reader.layout, forged, 1))


# ---------------------------------------------------------------- tombstones


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
        assert tomb.hash == protocol.tombstone_hash(s, tomb.extra["expired"]["hash"])
        # `expired` taken off a signed tombstone: its seq and hash name no entry.
        _put_head(store, reader, replace(tomb, extra={}))
        with pytest.raises(s3log.CorruptionError):
            reader.read(s)
        # Or pointed at another chain: its hash no longer names the one it ended.
        _put_head(store, reader, replace(tomb, extra={"expired": {**tomb.extra["expired"], "hash": b"\1" * 32}}))
        with pytest.raises(SignatureError):
            reader.read(s)


# ------------------------------------------------------------------- analytics


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
