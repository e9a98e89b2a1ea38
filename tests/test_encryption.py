"""Encrypted sessions (decision 0049): entry data sealed with a per-session data key,
wrapped by a key provider; readers with the provider see plaintext, the chain verifies
without it, and shredding the data key erases the data while the chain still verifies."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import boto3
import cbor2
import pytest

import s3log
from s3log import Encryption, LocalKeyProvider
from s3log._format.cbor import dumps
from s3log._format.values import append_digest
from s3log.agent import AgentSession
from s3log.encryption import ENVELOPE_TAG, KmsKeyProvider
from s3log.errors import (
    AppendKeyReused,
    EncryptionError,
    InvalidEntryError,
    PreconditionFailed,
    SessionShredded,
    TransientStoreError,
)
from s3log.testing.plugin import LocalS3

from .cli_env import invoke, log_of

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))
SECRET = "the patient's diagnosis"


def _enc(key: bytes = KEY, kid: str = "k1") -> s3log.LogConfig:
    return s3log.LogConfig(encryption=Encryption(LocalKeyProvider({kid: key})))


def _stored_bytes(store: s3log.MemoryStore) -> bytes:
    out = b""
    token = None
    while True:
        page = store.list("", token=token)
        out += b"".join(store.get(o.key).body for o in page.objects)
        if page.next_token is None:
            return out
        token = page.next_token


def _session(log: s3log.Log, n: int = 5, sid: str | None = None) -> str:
    w = log.create(sid, meta={"user": "alice"})
    for i in range(n):
        w.append("msg", {"i": i, "text": f"{SECRET} {i}"})
        if i % 2:
            w.commit()
    w.commit()
    return w.session_id


@pytest.mark.parametrize("keys", [[("k1", KEY)], "k1", None, 5], ids=["pairs", "text", "none", "int"])
def test_a_local_key_provider_takes_only_a_mapping_of_keys(keys: Any) -> None:
    """``keys`` that is not a mapping of ids to keys is an InvalidArgumentError naming it."""
    with pytest.raises(s3log.InvalidArgumentError, match="keys"):
        LocalKeyProvider(keys)


def test_round_trip_and_verify_without_the_key() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=300, **_enc_kw()))
    sid = _session(log, 12)
    assert [e.data["i"] for e in log.read(sid).entries] == list(range(12))
    w = log.open(sid)
    assert [m["data"]["text"] for m in w.state] == [f"{SECRET} {i}" for i in range(12)]
    w.append("msg", {"i": 12})
    w.commit()
    assert SECRET.encode() not in _stored_bytes(store)
    # No key: the chain verifies, lists and collects; its data is refused, by name.
    plain = s3log.Log(store)
    assert plain.verify(sid).entries == 13
    assert plain.list_session_ids() == [sid]
    plain.gc(older_than_ms=0)
    with pytest.raises(EncryptionError, match=sid):
        plain.read(sid)
    version = plain.head(sid).version
    with pytest.raises(EncryptionError, match=sid):
        plain.open(sid)
    with pytest.raises(EncryptionError, match=sid):
        plain.fork(sid, at_seq=3)
    assert plain.head(sid).version == version and plain.children(sid) == []
    assert [e.data["i"] for e in log.read(sid).entries] == list(range(13))


def _enc_kw() -> dict[str, Any]:
    return {"encryption": Encryption(LocalKeyProvider({"k1": KEY}))}


def test_every_read_verb_decrypts() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=_enc())
    sid = _session(log, 6)
    view = log.read_window(sid, since=0)
    assert view is not None and view.entries[0].data["text"] == f"{SECRET} 0"
    _, runs = log.read_runs(sid) or (None, [])
    values = [v for run in runs for v in (run.values if hasattr(run, "values") else [e.data for e in run])]
    assert [v["i"] for v in values] == list(range(6))
    _, suffix = log.read_suffix(sid, lambda es: len(es) >= 2)
    assert [e.data["i"] for e in suffix][-2:] == [4, 5]
    # A fresh log holds no key: a suffix read that runs out of entries fetches them too.
    _, whole = s3log.Log(store, config=_enc()).read_suffix(sid, lambda es: False)
    assert [e.data["i"] for e in whole] == list(range(6))
    _, last = s3log.Log(store, config=_enc()).read_suffix(sid, lambda es: es[0].data["i"] <= 4)
    assert [e.data["i"] for e in last][-2:] == [4, 5]
    result = log.append_latest(sid, [("msg", {"i": 6, "text": SECRET})])
    assert result.acked
    assert log.read(sid).entries[-1].data == {"i": 6, "text": SECRET}
    assert SECRET.encode() not in _stored_bytes(store)


def test_async_log_round_trip_rotation_and_shred() -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        log = s3log.AsyncLog(store, config=_enc())
        w = await log.create()
        w.append("msg", {"text": SECRET})
        await w.commit()
        sid = w.session_id
        assert await log.rotate_key(sid) == f"{sid}/000002"
        w = await log.open(sid)
        w.append("msg", {"text": "after"})
        await w.commit()
        view = await log.read(sid)
        assert [e.data["text"] for e in view.entries] == [SECRET, "after"]
        assert [e.data.value[0] for e in (await s3log.AsyncLog(store, config=_enc())._run(
            log._core.read(sid))).entries] == [f"{sid}/000001", f"{sid}/000002"]
        fresh = s3log.AsyncLog(store, config=_enc())
        child = await fresh.fork(sid, at_seq=0)
        assert (await fresh.read(child)).entries[0].data["seed"][0]["data"] == {"text": SECRET}
        await fresh.append_latest(sid, [("msg", {"text": "latest"})])
        _, suffix = await s3log.AsyncLog(store, config=_enc()).read_suffix(sid, lambda es: False)
        assert [e.data["text"] for e in suffix] == [SECRET, "after", "latest"]
        assert await fresh.compact(sid, lambda history, head: history[-1:])
        assert [e.data for e in (await fresh.read(sid)).entries] == [{"text": "latest"}]
        assert await log.shred(sid) == [f"{sid}/000001", f"{sid}/000002"]
        assert (await s3log.AsyncLog(store).verify(sid)).entries == 1
        with pytest.raises(SessionShredded, match=sid):
            await s3log.AsyncLog(store, config=_enc()).read(sid)
        await log.aclose()

    asyncio.run(main())


def test_shredded_session_verifies_lists_and_reads_as_shredded() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=_enc())
    sid = _session(log)
    keep = _session(log)
    assert log.shred(sid) == [f"{sid}/000001"]
    fresh = s3log.Log(store, config=_enc())
    assert fresh.verify(sid).ok and s3log.Log(store).verify(sid).ok
    assert set(fresh.list_session_ids()) == {sid, keep}
    with pytest.raises(SessionShredded, match=sid):
        fresh.read(sid)
    with pytest.raises(SessionShredded, match=sid):
        fresh.open(sid)
    with pytest.raises(SessionShredded):
        log.read(sid)  # the shredding log forgot the key too
    assert fresh.read(keep).entries[0].data["i"] == 0
    # No writer makes a shredded session a new key (its entries would read as a wrong key).
    with pytest.raises(SessionShredded, match=sid):
        fresh.append_latest(sid, [("msg", {"x": 1})])
    assert [o.key for o in store.list(f"s3log/keys/{sid}/").objects] == [f"s3log/keys/{sid}/shredded"]
    assert log.shred(sid) == []  # again: nothing left to delete


class _RacingStore(s3log.MemoryStore):
    """Runs ``before`` (once) just before the first create-only PUT of a key object."""

    before: Any = None

    def put_if_absent(self, key: str, body: bytes) -> str:
        hook, self.before = self.before, None
        if hook is not None and "/keys/" in key:
            hook()
        return super().put_if_absent(key, body)


def test_racing_writers_adopt_the_key_stored_first() -> None:
    store = _RacingStore()
    s3log.Log(store).create("s")  # a session from before encryption: no data key yet
    a, b = s3log.Log(store, config=_enc()), s3log.Log(store, config=_enc())
    won: list[Any] = []
    store.before = lambda: won.append(b.open("s"))  # b stores its key between a's LIST and PUT
    wa = a.open("s")
    wb = won[0]
    assert wa._core.sealer is not None and wb._core.sealer is not None
    assert wa._core.sealer.key == wb._core.sealer.key  # a adopted b's key
    wb.append("msg", {"by": "b"})
    wb.commit()
    wa.append("msg", {"by": "a"})
    result = wa.commit()  # a lost the race for the head: its entry is in a fork
    third = s3log.Log(store, config=_enc())
    assert third.read("s").entries[0].data == {"by": "b"}
    assert result.fork is not None and third.read(result.session_id).entries[-1].data == {"by": "a"}
    assert store.list("s3log/keys/").objects[0].key == "s3log/keys/s/000001"
    assert len(store.list("s3log/keys/").objects) == 1


def test_a_failed_key_create_acknowledges_nothing() -> None:
    class Failing(s3log.MemoryStore):
        def put_if_absent(self, key: str, body: bytes) -> str:
            if "/keys/" in key:
                raise PreconditionFailed(key)
            return super().put_if_absent(key, body)

    store = Failing()
    with pytest.raises(s3log.S3LogError):
        s3log.Log(store, config=_enc()).create("s")  # no key object to adopt: refused
    assert s3log.Log(store).list_session_ids() == []


def test_a_key_create_whose_reply_is_lost_is_found_and_adopted_by_the_retry() -> None:
    class LostReply(s3log.MemoryStore):
        lose = True

        def put_if_absent(self, key: str, body: bytes) -> str:
            etag = super().put_if_absent(key, body)
            if "/keys/" in key and self.lose:
                self.lose = False
                raise TransientStoreError(f"connection reset after PUT {key} was sent")
            return etag

    store = LostReply()
    with pytest.raises(s3log.StoreError):
        s3log.Log(store, config=_enc()).create("s")  # refused: nothing sealed, nothing acknowledged
    stored = store.get("s3log/keys/s/000001").body
    w = s3log.Log(store, config=_enc()).create("s")
    w.append("msg", {"text": SECRET})
    w.commit()
    assert store.get("s3log/keys/s/000001").body == stored  # the stored key was adopted
    assert s3log.Log(store, config=_enc()).read("s").entries[0].data == {"text": SECRET}


def test_fork_of_an_encrypted_session() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=_enc())
    sid = _session(log, 4)
    child = log.fork(sid, at_seq=2)
    seed = log.read(child).entries[0].data["seed"]
    assert [m["data"]["i"] for m in seed] == [0, 1, 2]
    raw = s3log.Log(store, config=_enc())._run(log._core.read(child)).entries[0].data["seed"]
    assert isinstance(raw, cbor2.CBORTag) and raw.tag == ENVELOPE_TAG  # the seed is sealed too
    w = log.open(child)
    assert [m["data"]["i"] for m in w.state] == [0, 1, 2]
    w.append("child", {"text": SECRET})
    w.commit()
    assert log.read(child).entries[-1].data == {"text": SECRET}
    assert SECRET.encode() not in _stored_bytes(store)
    assert s3log.Log(store).verify(child).ok
    # Shredding the parent erases what the fork inherited from it.
    log.shred(sid)
    with pytest.raises(SessionShredded, match=sid):
        s3log.Log(store, config=_enc()).read(child)


def test_wrong_key_is_refused_naming_the_session_before_anything_is_written() -> None:
    store = s3log.MemoryStore()
    sid = _session(s3log.Log(store, config=_enc()))
    wrong = s3log.Log(store, config=_enc(OTHER))
    with pytest.raises(EncryptionError, match=f"session {sid}.*wrong key"):
        wrong.read(sid)
    version = s3log.Log(store).head(sid).version
    with pytest.raises(EncryptionError, match=sid):
        wrong.open(sid)
    with pytest.raises(EncryptionError, match=sid):
        wrong.append_latest(sid, [("msg", {"x": 1})])
    assert s3log.Log(store).head(sid).version == version
    with pytest.raises(EncryptionError, match="not held"):
        s3log.Log(store, config=_enc(KEY, "other-id")).read(sid)


def test_wrapping_key_rotation_keeps_old_sessions_readable() -> None:
    store = s3log.MemoryStore()
    old = _session(s3log.Log(store, config=_enc()))
    both = s3log.Log(store, config=s3log.LogConfig(encryption=Encryption(
        LocalKeyProvider({"k1": KEY, "k2": OTHER}, current="k2"))))
    new = _session(both)
    assert both.read(old).entries[0].data["i"] == 0
    assert both.read(new).entries[0].data["i"] == 0
    with pytest.raises(EncryptionError):
        s3log.Log(store, config=_enc()).read(new)  # wrapped by k2
    body = cbor2.loads(store.get(f"s3log/keys/{new}/000001").body)
    assert body["kek"] == "k2" and body["alg"] == "AES-256-GCM"


def test_envelope_data_and_plaintext_digests_are_refused_or_hidden() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=_enc())
    w = log.create()
    with pytest.raises(InvalidEntryError, match=str(ENVELOPE_TAG)):
        w.append("msg", cbor2.CBORTag(ENVELOPE_TAG, ["x", b"0" * 12, b""]))
    # An idempotency key retried is stored once; the head keeps no plain hash of the data.
    w.append("msg", {"text": SECRET}, key="req-1")
    w.commit()
    w2 = log.open(w.session_id)
    w2.append("msg", {"text": SECRET}, key="req-1")
    w2.commit()
    assert len(log.read(w.session_id).entries) == 1
    head = log.head(w.session_id)
    assert all(k.digest != append_digest("msg", dumps({"text": SECRET})) for k in head.append_keys)


def test_a_keyed_retry_by_another_process_is_stored_once_even_from_a_fork() -> None:
    """A keyed append seals to the same bytes each time (its nonce derived from its key
    and content), so a retry by a restarted writer, which holds no plaintext of the first
    attempt, is found in the head's window or in the fork a lost race made."""
    store = s3log.MemoryStore()
    sid = s3log.Log(store, config=_enc()).create().session_id
    s3log.Log(store, config=_enc()).open(sid).append_durable("k", {"turn": 0}, key="req-0")
    again = s3log.Log(store, config=_enc()).open(sid).append_durable("k", {"turn": 0}, key="req-0")
    assert again.seq == 0 and again.data == {"turn": 0}
    # Lost a race: the entry is in a fork the crashed writer never reported.
    log = s3log.Log(store, config=_enc())
    w = log.open(sid)
    log.open(sid).append_durable("k", "winner")
    x = w.append_durable("k", {"turn": 1}, key="req-x")
    assert w.forks and x.session_id != sid
    restarted = s3log.Log(store, config=_enc()).open(sid)
    found = restarted.append_durable("k", {"turn": 1}, key="req-x")
    assert found.session_id == x.session_id and found.seq == x.seq
    assert [e.data for e in s3log.Log(store, config=_enc()).read(sid).entries] == [{"turn": 0}, "winner"]
    with pytest.raises(s3log.AppendKeyReused):
        restarted.append_durable("k", {"turn": "other"}, key="req-x")


def test_agent_session_and_analytics_scan() -> None:
    pytest.importorskip("pyarrow")
    from s3log import analytics

    store = s3log.MemoryStore()
    log = s3log.Log(store, config=_enc())
    s = AgentSession.create(log, system_prompt=SECRET)
    s.user_input("hello")
    s.assistant_items([{"role": "assistant", "content": "hi"}])
    s.turn_end()
    s.flush()
    r = AgentSession.restore(log, s.session_id)
    assert r.state.system_prompt == SECRET and r.state.turn_count == 1
    assert SECRET.encode() not in _stored_bytes(store)
    table = analytics.to_arrow(store, encryption=Encryption(LocalKeyProvider({"k1": KEY})))
    assert SECRET in json.dumps([cbor2.loads(b) for b in table.column("data_cbor").to_pylist()], default=str)
    sealed = analytics.to_arrow(store)
    assert SECRET.encode() not in b"".join(sealed.column("data_cbor").to_pylist())


def test_kms_key_provider(s3log_server: LocalS3, s3log_bucket: str) -> None:
    kms = boto3.session.Session().client("kms", endpoint_url=s3log_server.endpoint_url, region_name="us-east-1")
    key_id = kms.create_key(KeyUsage="ENCRYPT_DECRYPT", KeySpec="SYMMETRIC_DEFAULT")["KeyMetadata"]["KeyId"]
    store = s3log.S3Store(s3log_bucket, endpoint_url=s3log_server.endpoint_url)
    log = s3log.Log(store, config=s3log.LogConfig(encryption=Encryption(KmsKeyProvider(kms, key_id))))
    sid = _session(log, 3)
    assert [e.data["i"] for e in s3log.Log(store, config=log.config).read(sid).entries] == [0, 1, 2]
    assert s3log.Log(store).verify(sid).ok
    log.shred(sid)
    with pytest.raises(SessionShredded):
        s3log.Log(store, config=log.config).read(sid)

    async def in_an_async_log() -> list[Any]:  # a blocking provider, called off the event loop
        alog = s3log.AsyncLog(s3log.AsyncMemoryStore(), config=log.config)
        w = await alog.create()
        w.append("msg", {"text": SECRET})
        await w.commit()
        entries = (await s3log.AsyncLog(alog.store, config=log.config).read(w.session_id)).entries
        await alog.aclose()
        return [e.data for e in entries]

    assert asyncio.run(in_an_async_log()) == [{"text": SECRET}]


def test_cli_show_and_export_with_a_data_key(env: dict[str, str], tmp_path: Path) -> None:
    keyfile = tmp_path / "k1.key"
    keyfile.write_text(KEY.hex())
    log = log_of(env, _enc())
    sid = _session(log, 3)
    result = invoke(env, "--data-key", f"k1={keyfile}", "show", sid, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["entries"][0]["data"]["text"] == f"{SECRET} 0"
    result = invoke(env, "show", sid, "--json")
    assert result.exit_code != 0 and sid in result.output and "encrypted" in result.output
    assert invoke(env, "verify", sid).exit_code == 0
    out = tmp_path / "out"
    result = invoke(env, "--data-key", f"k1={keyfile}", "export", "--format", "jsonl", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert SECRET in (out / "entries.jsonl").read_text()


def test_key_objects_in_a_store_of_their_own() -> None:
    """With Object Lock on the log's bucket, key objects live elsewhere: shredding
    deletes them there, and the log's store holds no key object at all."""
    store, keys = s3log.MemoryStore(), s3log.MemoryStore()
    config = s3log.LogConfig(encryption=Encryption(LocalKeyProvider({"k1": KEY}), key_store=keys))
    log = s3log.Log(store, config=config)
    sid = _session(log, 3)
    assert store.list("s3log/keys/").objects == []
    assert [o.key for o in keys.list("s3log/keys/").objects] == [f"s3log/keys/{sid}/000001"]
    assert s3log.Log(store, config=config).read(sid).entries[2].data["i"] == 2
    log.shred(sid)
    assert [o.key for o in keys.list("s3log/keys/").objects] == [f"s3log/keys/{sid}/shredded"]
    with pytest.raises(SessionShredded):
        s3log.Log(store, config=config).read(sid)
    assert s3log.Log(store).verify(sid).ok
    log.close()


def test_a_commit_acknowledges_plaintext_equal_to_what_is_read() -> None:
    log = s3log.Log(s3log.MemoryStore(), config=_enc())
    w = log.create()
    ticket = w.submit("msg", {"text": SECRET})
    w.append("msg", {"n": 2})
    result = w.commit()
    assert [e.data for e in result.acked] == [{"text": SECRET}, {"n": 2}]
    assert result.acked == log.read(w.session_id).entries
    assert w.wait(ticket).data == {"text": SECRET}
    assert w.append_durable("msg", {"n": 3}).data == {"n": 3}


def test_compaction_sees_plaintext_and_keeps_it_sealed() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=_enc())
    sid = _session(log, 4)
    child = log.open(log.fork(sid, at_seq=1))  # a fork: its history starts with a sealed seed
    child.append("msg", {"i": 9, "text": SECRET})
    child.commit()
    seen: list[Any] = []

    def summarize(history: list[dict[str, Any]], head: Any) -> list[dict[str, Any]]:
        seen.extend(m["data"] for m in history)
        return [{"kind": "summary", "ts": history[-1]["ts"], "data": {"text": f"summary: {SECRET}"}}]

    assert log.compact(child.session_id, summarize)
    assert [d["i"] for d in seen] == [0, 1, 9]
    assert [e.data for e in log.read(child.session_id).entries] == [{"text": f"summary: {SECRET}"}]
    assert SECRET.encode() not in _stored_bytes(store)
    assert s3log.Log(store).verify(child.session_id).ok


def test_integrations_read_and_write_plaintext_through_an_encrypted_log() -> None:
    pytest.importorskip("langgraph")
    pytest.importorskip("agents")
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

    from s3log.integrations.langgraph import S3LogSaver
    from s3log.integrations.openai_agents import S3LogSession

    store = s3log.MemoryStore()
    saver = S3LogSaver(s3log.Log(store, config=_enc()))
    cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    checkpoint = generate_checkpoint()
    checkpoint["channel_values"] = {"note": SECRET}
    saver.put(cfg, checkpoint, generate_metadata(step=1), {"note": 1})
    got = S3LogSaver(s3log.Log(store, config=_enc())).get_tuple(cfg)
    assert got is not None and got.checkpoint["channel_values"] == {"note": SECRET}

    async def chat() -> list[Any]:
        alog = s3log.AsyncLog(s3log.AsyncMemoryStore(), config=_enc())
        await S3LogSession("conv-1", alog).add_items([{"role": "user", "content": SECRET}])
        items = await S3LogSession("conv-1", s3log.AsyncLog(alog.store, config=_enc())).get_items()
        await alog.aclose()
        return [i["content"] for i in items]

    assert asyncio.run(chat()) == [SECRET]
    assert SECRET.encode() not in _stored_bytes(store)


@pytest.mark.parametrize("seed", range(12))
def test_under_store_faults_every_acknowledged_entry_reads_back_once_in_plaintext(seed: int) -> None:
    """Two writers (separate processes' logs: each its own keyring) race on one session
    through a store that fails, times out and loses replies; every entry acknowledged is
    read back once, decrypted, where its acknowledgement says."""
    from s3log.testing.faults import FaultyStore, random_plan

    inner = s3log.MemoryStore()
    store = FaultyStore(inner, random_plan(seed, rate=0.15))
    config = s3log.LogConfig(encryption=Encryption(LocalKeyProvider({"k1": KEY})),
                             retry=s3log.RetryPolicy(attempts=2, initial=0.0, max_backoff=0.0))
    logs = [s3log.Log(store, config=config) for _ in range(2)]
    writers: list[Any] = [None, None]
    acked: list[Any] = []
    for step in range(40):
        n = step % 2
        try:
            if writers[n] is None:
                try:
                    writers[n] = logs[n].open("s")
                except s3log.SessionNotFound:
                    writers[n] = logs[n].create("s", lazy=True)
            writers[n].append("msg", {"w": n, "i": step, "text": SECRET})
            acked += writers[n].commit().acked
        except s3log.SessionExists:
            writers[n] = None  # the other writer's lazy create won: open it next time
        except s3log.StoreError:
            pass  # the entry stays queued (or uncertain): the next commit settles it
    assert len(acked) >= 20, seed
    reader = s3log.Log(inner, config=s3log.LogConfig(encryption=Encryption(LocalKeyProvider({"k1": KEY}))))
    seen: dict[str, list[Any]] = {}
    for e in acked:
        if e.session_id not in seen:
            seen[e.session_id] = [x.data for x in reader.read(e.session_id).entries]
        assert e.data in seen[e.session_id], (seed, e)
        assert seen[e.session_id].count(e.data) == 1, (seed, e)
    assert SECRET.encode() not in _stored_bytes(inner)


# --- key objects: never made twice under one ref, never after a shred ----------------


def _enc_keys_in(keys: s3log.MemoryStore) -> s3log.LogConfig:
    return s3log.LogConfig(encryption=Encryption(LocalKeyProvider({"k1": KEY}), key_store=keys))


def test_a_writer_never_makes_a_second_key_under_a_ref_the_session_already_names() -> None:
    """Two logs on one bucket, one keeping its key objects in a store of their own
    (Encryption(key_store=...)), the other not (a deploy with the option missing). The
    second finds no key object, but the head's entries name ``s/000001``: it is refused
    instead of making a second key under that ref, which would leave the session's
    entries under one ref sealed with two keys, readable whole by neither log."""
    store, keys = s3log.MemoryStore(), s3log.MemoryStore()
    a = s3log.Log(store, config=_enc_keys_in(keys))
    w = a.create("s")
    w.append("msg", {"by": "a"})
    w.commit()
    b = s3log.Log(store, config=_enc())
    with pytest.raises(SessionShredded, match="s/000001"):  # refused before writing
        b.append_latest("s", [("msg", {"by": "b"})])
    assert store.list("s3log/keys/").objects == []
    # Every acknowledged entry must stay readable by the log configured as it was written.
    assert [e.data for e in s3log.Log(store, config=_enc_keys_in(keys)).read("s").entries] == [{"by": "a"}]


def test_a_writer_opened_after_a_shred_is_refused_even_by_a_log_that_held_the_key() -> None:
    """A long-lived Log (a server process) holding a session's key: after another
    process shredded the session, a writer it opens and its append_latest are refused,
    not acknowledged under a key no reader will find."""
    store = s3log.MemoryStore()
    server = s3log.Log(store, config=_enc())
    w = server.create("s")
    w.append("msg", {"i": 0})
    w.commit()
    s3log.Log(store, config=_enc()).shred("s")  # another process erases the session
    with pytest.raises(SessionShredded):
        w2 = server.open("s")  # reopened, as the docs advise
        w2.append("msg", {"i": 1})
        w2.commit()
    with pytest.raises(SessionShredded):
        server.append_latest("s", [("msg", {"i": 2})])


def test_a_shred_that_returned_leaves_nothing_readable() -> None:
    """A shred racing a writer's first key create: the shred lists no key, stores its
    marker and returns; the writer's create-only PUT of key 1 lands after it. The writer
    sees the marker, deletes that key and is refused: nothing readable is left after
    the erasure was reported done."""
    store = _RacingStore()
    s3log.Log(store).create("s")  # a session from before encryption: no data key yet
    eraser = s3log.Log(store, config=_enc())
    store.before = lambda: eraser.shred("s")
    try:
        w = s3log.Log(store, config=_enc()).open("s")
        w.append("msg", {"text": SECRET})
        w.commit()
    except SessionShredded:
        return  # refused: fine
    with pytest.raises(SessionShredded):
        s3log.Log(store, config=_enc()).read("s")


def _rotate_and_commit(store: s3log.MemoryStore, sid: str) -> None:
    other = s3log.Log(store, config=_enc())
    other.rotate_key(sid)
    w = other.open(sid)
    w.append("msg", {"text": "after rotation"})
    w.commit()


@pytest.mark.parametrize("verb", ["fork", "compact"])
def test_fork_and_compact_racing_a_rotation_fetch_the_new_key(verb: str) -> None:
    """Log.fork and Log.compact read the session once to fetch its keys (Log._sealing),
    then read it again to write: an entry committed in between under a newly rotated
    key has that key fetched, and the verb goes on; the session is live, not shredded."""
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=_enc())
    w = log.create("s")
    w.append("msg", {"text": "before"})
    w.commit()
    sealing = log._sealing

    def racing(session_id: str, reducer: Any) -> Any:
        got = sealing(session_id, reducer)
        _rotate_and_commit(store, session_id)  # another process, between the two reads
        return got

    log._sealing = racing  # type: ignore[method-assign]
    if verb == "fork":
        child = log.fork("s")
        assert [m["data"]["text"] for m in log.read(child).entries[0].data["seed"]] == ["before", "after rotation"]
    else:
        assert log.compact("s", lambda history, head: history[-1:])
        assert [e.data for e in s3log.Log(store, config=_enc()).read("s").entries] == [{"text": "after rotation"}]


def test_create_of_a_taken_id_writes_no_key_object() -> None:
    """Bad input (an id that exists) is refused before anything is written."""
    store = s3log.MemoryStore()
    s3log.Log(store).create("s")  # a plain session
    with pytest.raises(s3log.SessionExists):
        s3log.Log(store, config=_enc()).create("s")
    assert store.list("s3log/keys/").objects == []


def test_plain_compaction_of_an_encrypted_fork_names_the_encryption() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=_enc())
    w = log.create("s")
    w.append("msg", {"text": SECRET})
    w.commit()
    child = log.fork("s")
    with pytest.raises(EncryptionError, match=child):
        s3log.Log(store).compact(child, lambda history, head: history)


# --- a conflict fork: its writer keeps the parent's key until reopened ------------------


def _conflict_fork(log: s3log.Log, data: Any, key: str | None = None) -> tuple[str, s3log.Writer[Any], Any]:
    sid = log.create().session_id
    w = log.open(sid)
    log.open(sid).append_durable("k", "winner")
    x = w.append_durable("k", data, key=key)
    assert x.session_id != sid  # landed in the conflict fork
    return sid, w, x


def test_what_a_writer_commits_in_its_conflict_fork_is_shredded_with_the_parent() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=_enc())
    sid, _, x = _conflict_fork(log, {"text": SECRET})
    log.shred(sid)
    with pytest.raises(SessionShredded):
        s3log.Log(store, config=_enc()).read(x.session_id)


def test_a_restarted_writers_keyed_retry_in_a_conflict_fork_is_refused_not_stored_twice() -> None:
    """The writer seals in its conflict fork under the parent's key; a restarted one
    opening the fork seals under the fork's own key, to other bytes: refused as
    AppendKeyReused (as across a rotation), and nothing is stored twice."""
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=_enc())
    _, w, x = _conflict_fork(log, {"turn": 1}, key="req-x")
    y = w.append_durable("k", {"turn": 2}, key="req-y")
    restarted = s3log.Log(store, config=_enc()).open(x.session_id)
    with pytest.raises(AppendKeyReused):
        restarted.append_durable("k", {"turn": 2}, key="req-y")
    assert [e.data for e in log.read(y.session_id).entries[1:]] == [{"turn": 1}, {"turn": 2}]


def test_a_log_without_the_provider_appends_nothing_in_the_clear_to_a_sealed_session() -> None:
    store = s3log.MemoryStore()
    w = s3log.Log(store, config=_enc()).create("s")
    w.append("msg", {"text": SECRET})
    w.commit()
    before = {k: store.get(k).body for k in store.all_keys()}
    with pytest.raises(EncryptionError, match="no key provider"):
        s3log.Log(store).append_latest("s", [("msg", {"text": "in the clear"})])
    assert {k: store.get(k).body for k in store.all_keys()} == before
    assert [e.data for e in s3log.Log(store, config=_enc()).read("s").entries] == [{"text": SECRET}]


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- the same guards through AsyncLog ------------------------------------------------


def test_async_never_makes_a_second_key_under_a_named_ref() -> None:
    async def main() -> None:
        store, keys = s3log.AsyncMemoryStore(), s3log.AsyncMemoryStore()
        a = s3log.AsyncLog(store, config=s3log.LogConfig(
            encryption=Encryption(LocalKeyProvider({"k1": KEY}), key_store=keys)))
        w = await a.create("s")
        w.append("msg", {"by": "a"})
        await w.commit()
        b = s3log.AsyncLog(store, config=_enc())
        with pytest.raises(SessionShredded, match="s/000001"):
            await b.append_latest("s", [("msg", {"by": "b"})])
        assert store.sync.list("s3log/keys/").objects == []
        assert [e.data for e in (await a.read("s")).entries] == [{"by": "a"}]
    _run(main())


def test_async_writer_opened_after_a_shred_is_refused_by_a_log_that_held_the_key() -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        server = s3log.AsyncLog(store, config=_enc())
        w = await server.create("s")
        w.append("msg", {"i": 0})
        await w.commit()
        await s3log.AsyncLog(store, config=_enc()).shred("s")
        with pytest.raises(SessionShredded):
            w2 = await server.open("s")
            w2.append("msg", {"i": 1})
            await w2.commit()
        with pytest.raises(SessionShredded):
            await server.append_latest("s", [("msg", {"i": 2})])
    _run(main())


def test_async_a_shred_that_returned_leaves_nothing_readable() -> None:
    async def main() -> None:
        sync = _RacingStore()
        store = s3log.AsyncMemoryStore(sync)
        s3log.Log(sync).create("s")
        sync.before = lambda: s3log.Log(sync, config=_enc()).shred("s")
        try:
            w = await s3log.AsyncLog(store, config=_enc()).open("s")
            w.append("msg", {"text": SECRET})
            await w.commit()
        except SessionShredded:
            return
        with pytest.raises(SessionShredded):
            await s3log.AsyncLog(store, config=_enc()).read("s")
    _run(main())


@pytest.mark.parametrize("verb", ["fork", "compact"])
def test_async_fork_and_compact_racing_a_rotation_fetch_the_new_key(verb: str) -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        log = s3log.AsyncLog(store, config=_enc())
        w = await log.create("s")
        w.append("msg", {"text": "before"})
        await w.commit()
        sealing = log._sealing

        async def racing(session_id: str, reducer: Any) -> Any:
            got = await sealing(session_id, reducer)
            other = s3log.Log(store.sync, config=_enc())
            other.rotate_key(session_id)
            ow = other.open(session_id)
            ow.append("msg", {"text": "after rotation"})
            ow.commit()
            return got

        log._sealing = racing  # type: ignore[method-assign]
        if verb == "fork":
            child = await log.fork("s")
            seed = (await log.read(child)).entries[0].data["seed"]
            assert [m["data"]["text"] for m in seed] == ["before", "after rotation"]
        else:
            assert await log.compact("s", lambda history, head: history[-1:])
            got = await s3log.AsyncLog(store, config=_enc()).read("s")
            assert [e.data for e in got.entries] == [{"text": "after rotation"}]
    _run(main())


def test_async_create_of_a_taken_id_writes_no_key_object() -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        await s3log.AsyncLog(store).create("s")
        with pytest.raises(s3log.SessionExists):
            await s3log.AsyncLog(store, config=_enc()).create("s")
        assert store.sync.list("s3log/keys/").objects == []
    _run(main())


def test_async_plain_compaction_of_an_encrypted_fork_names_the_encryption() -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        log = s3log.AsyncLog(store, config=_enc())
        w = await log.create("s")
        w.append("msg", {"text": SECRET})
        await w.commit()
        child = await log.fork("s")
        with pytest.raises(EncryptionError, match=child):
            await s3log.AsyncLog(store).compact(child, lambda history, head: history)
    _run(main())


async def _aconflict_fork(log: s3log.AsyncLog, data: Any, key: str | None = None) -> tuple[str, Any, Any]:
    sid = (await log.create()).session_id
    w = await log.open(sid)
    await (await log.open(sid)).append_durable("k", "winner")
    x = await w.append_durable("k", data, key=key)
    assert x.session_id != sid
    return sid, w, x


def test_async_conflict_fork_entries_are_shredded_with_the_parent() -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        log = s3log.AsyncLog(store, config=_enc())
        sid, _, x = await _aconflict_fork(log, {"text": SECRET})
        await log.shred(sid)
        with pytest.raises(SessionShredded):
            await s3log.AsyncLog(store, config=_enc()).read(x.session_id)
    _run(main())


def test_async_restarted_writers_keyed_retry_in_a_conflict_fork_is_refused() -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        log = s3log.AsyncLog(store, config=_enc())
        _, w, x = await _aconflict_fork(log, {"turn": 1}, key="req-x")
        y = await w.append_durable("k", {"turn": 2}, key="req-y")
        restarted = await s3log.AsyncLog(store, config=_enc()).open(x.session_id)
        with pytest.raises(AppendKeyReused):
            await restarted.append_durable("k", {"turn": 2}, key="req-y")
        got = await log.read(y.session_id)
        assert [e.data for e in got.entries[1:]] == [{"turn": 1}, {"turn": 2}]
    _run(main())


def test_async_log_without_the_provider_appends_nothing_in_the_clear_to_a_sealed_session() -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        w = await s3log.AsyncLog(store, config=_enc()).create("s")
        w.append("msg", {"text": SECRET})
        await w.commit()
        before = {k: store.sync.get(k).body for k in store.sync.all_keys()}
        with pytest.raises(EncryptionError, match="no key provider"):
            await s3log.AsyncLog(store).append_latest("s", [("msg", {"text": "in the clear"})])
        assert {k: store.sync.get(k).body for k in store.sync.all_keys()} == before
    _run(main())


# --- a shred racing the first key create --------------------------------------------


class _Gated(s3log.MemoryStore):
    """Parks the thread named in a gate at a request, until the test releases it.
    ``gates[(thread, method, nth)] = (parked, release)``: the nth such request on
    key objects of that thread (from 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: dict[tuple[str, str, int], tuple[threading.Event, threading.Event]] = {}
        self.seen: dict[tuple[str, str], int] = {}

    def _gate(self, method: str, key: str) -> None:
        if "/keys/" not in key:
            return
        name = threading.current_thread().name
        n = self.seen[(name, method)] = self.seen.get((name, method), 0) + 1
        gate = self.gates.get((name, method, n))
        if gate is not None:
            gate[0].set()
            assert gate[1].wait(10)

    def put_if_absent(self, key: str, body: bytes) -> str:
        self._gate("put", key)
        return super().put_if_absent(key, body)

    def list(self, prefix: str, **kw: Any) -> Any:
        self._gate("list", prefix)
        return super().list(prefix, **kw)


def _gate(store: _Gated, thread: str, method: str, n: int) -> tuple[threading.Event, threading.Event]:
    store.gates[(thread, method, n)] = gate = (threading.Event(), threading.Event())
    return gate


def _start(name: str, fn: Any, out: dict[str, Any]) -> threading.Thread:
    def body() -> None:
        try:
            out[name] = fn()
        except BaseException as exc:
            out[name] = exc

    t = threading.Thread(target=body, name=name, daemon=True)
    t.start()
    return t


def test_a_shred_deletes_a_key_made_between_its_first_listing_and_its_marker() -> None:
    """The shred lists no key; a writer's first key create (list, PUT, list) runs to the
    end before the shred's marker PUT. The shred lists again after its marker, so it
    deletes that key too: nothing stays readable once it reports the erasure done."""
    store = _Gated()
    s3log.Log(store).create("s")
    parked, release = _gate(store, "eraser", "put", 1)  # the marker PUT
    out: dict[str, Any] = {}
    t = _start("eraser", lambda: s3log.Log(store, config=_enc()).shred("s"), out)
    assert parked.wait(10)
    w = s3log.Log(store, config=_enc()).open("s")  # lists (no marker yet), PUTs key 1, lists
    w.append("msg", {"text": SECRET})
    w.commit()
    release.set()
    t.join(10)
    assert out["eraser"] == ["s/000001"]
    with pytest.raises(SessionShredded):
        s3log.Log(store, config=_enc()).read("s")


def test_a_writer_adopting_a_key_made_while_a_shred_ran_is_refused() -> None:
    """Writers A and B both list no key; a shred lists none and stores its marker; A's
    create-only PUT of key 1 lands, B's meets A's key and adopts it (a GET: no LIST, so
    B never saw the marker), and B lists once more after adopting it: both are refused,
    so nothing is acknowledged under the key A then deletes."""
    store = _Gated()
    s3log.Log(store).create("s")
    a_put = _gate(store, "A", "put", 1)
    a_list = _gate(store, "A", "list", 2)  # A's LIST after its key PUT
    b_put = _gate(store, "B", "put", 1)
    out: dict[str, Any] = {}

    def b() -> Any:
        w = s3log.Log(store, config=_enc()).open("s")
        w.append("msg", {"text": "by B"})
        return w.commit()

    ta = _start("A", lambda: s3log.Log(store, config=_enc()).open("s"), out)
    tb = _start("B", b, out)
    assert a_put[0].wait(10) and b_put[0].wait(10)  # both listed: no key, no marker
    assert s3log.Log(store, config=_enc()).shred("s") == []  # marker stored, nothing to delete
    a_put[1].set()
    assert a_list[0].wait(10)  # A stored key 1, has not listed yet
    b_put[1].set()
    tb.join(10)
    result = out["B"]
    a_list[1].set()
    ta.join(10)
    assert isinstance(result, SessionShredded) and isinstance(out["A"], SessionShredded)
    assert [o.key for o in store.list("s3log/keys/").objects] == ["s3log/keys/s/shredded"]


# --- a keyless append_latest given a head to start from ------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_keyless_append_latest_with_after_appends_nothing_in_the_clear(mode: str) -> None:
    """``after`` (a result of an encrypted log's call on the session) skips the head GET;
    the head it names is checked all the same: nothing in the clear."""
    store = s3log.MemoryStore()
    r = s3log.Log(store, config=_enc()).append_latest("s", [("msg", {"text": SECRET})], create_meta={})
    before = {k: store.get(k).body for k in store.all_keys()}
    with pytest.raises(EncryptionError, match="no key provider"):
        if mode == "sync":
            s3log.Log(store).append_latest("s", [("msg", {"text": "in the clear"})], after=r)
        else:
            _run(s3log.AsyncLog(s3log.AsyncMemoryStore(store)).append_latest(
                "s", [("msg", {"text": "in the clear"})], after=r))
    assert {k: store.get(k).body for k in store.all_keys()} == before


def test_append_latest_acknowledges_plaintext_equal_to_what_is_read() -> None:
    """append_latest acknowledges plaintext, as Writer.commit does and reads return."""
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=_enc())
    r = log.append_latest("s", [("msg", {"text": SECRET})], create_meta={})
    assert r.acked[0].data == log.read("s").entries[0].data == {"text": SECRET}
