"""Signed heads: a writer with bucket access cannot rewrite history
undetected by a reader holding the verification key; checkpoints catch what a
signature cannot (the key's holder rewriting, an old head put back)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import cbor2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import s3log
from s3log._format.codec import decode_head, decode_segment, encode_head, encode_segment
from s3log._format.entries import make_entry
from s3log._format.layout import Layout
from s3log._format.values import Head
from s3log._protocol import listing, read
from s3log.errors import CorruptionError
from s3log.signing import (
    ED25519,
    AnyVerifier,
    Checkpointer,
    CheckpointError,
    Ed25519Signer,
    KmsSigner,
    KmsVerifier,
    PublicKeyVerifier,
    Signature,
    SignatureError,
    Signer,
    SigningError,
    check_checkpoints,
    head_payload,
    key_id_for,
    sign_head,
)
from s3log.signing.checkpoints import checkpoint_key
from s3log.store._s3common import boto3_session
from s3log.store.memory import MemoryStore
from s3log.testing.plugin import LocalS3
from s3log.testing.sim import run_direct

# --------------------------------------------------------------------------- helpers


def _kms(server: LocalS3) -> Any:
    # A session sharing botocore's parsed models, as s3log's own clients do (0.1 s of CPU less).
    return boto3_session().client("kms", endpoint_url=server.endpoint_url, region_name="us-east-1")


def _kms_key(server: LocalS3, spec: str = "ECC_NIST_P256") -> str:
    return str(_kms(server).create_key(KeyUsage="SIGN_VERIFY", KeySpec=spec)["KeyMetadata"]["KeyId"])


def _store(server: LocalS3, bucket: str) -> s3log.S3Store:
    return s3log.S3Store(bucket, endpoint_url=server.endpoint_url)


def _log(server: LocalS3, bucket: str, **cfg: Any) -> s3log.Log:
    # A small tail: commits flush to segments and merge, so signed heads take every path.
    return s3log.Log(_store(server, bucket), config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=600, **cfg))


def _write_session(log: s3log.Log, n: int = 12) -> str:
    w = log.create(meta={"user": "alice"})
    for i in range(n):
        w.append("msg", {"i": i, "text": f"message {i}"})
        w.commit()
    return w.session_id


def _rewrite_history(server: LocalS3, bucket: str, sid: str, *, seq: int, data: Any,
                     resign: Signer | None = None, keep_sig: bool = False, prefix: str = "s3log") -> Head:
    """The attack: with nothing but bucket access, change entry ``seq``'s data, recompute
    every hash after it, write new segments and a new head (unsigned, re-signed with
    ``resign``, or keeping the old signature)."""
    client = server.client()
    layout = Layout(prefix)
    key = layout.head(sid)
    head = decode_head(client.get_object(Bucket=bucket, Key=key)["Body"].read(), key)
    entries = []
    for seg_key in head.segments:
        body = client.get_object(Bucket=bucket, Key=seg_key)["Body"].read()
        entries.extend(decode_segment(body, seg_key).entries)
    entries.extend(head.tail)
    forged = []
    prev: bytes | None = None
    for e in entries:
        e2 = make_entry(e.seq, prev, e.kind, e.ts, data if e.seq == seq else e.data)
        forged.append(e2)
        prev = e2.hash
    segments: tuple[str, ...] = ()
    if len(forged) > 2:  # all but the last two in one new segment, those two inline
        seg_key = layout.segment(sid, 0, forged[-3].hash, "00000000000000aa")
        client.put_object(Bucket=bucket, Key=seg_key, Body=encode_segment(sid, forged[:-2]))
        segments = (seg_key,)
    new = replace(head, seq=forged[-1].seq, hash=forged[-1].hash, segments=segments, levels=(0,) * len(segments),
                  tail=tuple(forged[-len(forged[-2:]):]))
    if not keep_sig:
        new = sign_head(resign, new, f"{bucket}/{prefix}")
    client.put_object(Bucket=bucket, Key=key, Body=encode_head(new))
    return new


@pytest.fixture
def bucket(s3log_server: LocalS3) -> str:
    return s3log_server.create_bucket()


@pytest.fixture
def ed_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


class Keys:
    """One signer and the matching verifier, for Ed25519 or a KMS key on the local server."""

    def __init__(self, signer: Signer, verifier: Any) -> None:
        self.signer = signer
        self.verifier = verifier


@pytest.fixture(params=["ed25519", "kms-ecc", "kms-rsa"])
def keys(request: pytest.FixtureRequest, s3log_server: LocalS3) -> Keys:
    if request.param == "ed25519":
        signer = Ed25519Signer(Ed25519PrivateKey.generate())
        return Keys(signer, PublicKeyVerifier([signer.public_key]))
    kms = _kms(s3log_server)
    key = _kms_key(s3log_server, "ECC_NIST_P256" if request.param == "kms-ecc" else "RSA_2048")
    return Keys(KmsSigner(kms, key), KmsVerifier(kms, key))


# ----------------------------------------------------------------- the rewrite attack


@pytest.mark.parametrize("attack", ["unsigned", "resigned", "kept"])
def test_history_rewrite_passes_plain_verify_and_fails_signed_verify(
    s3log_server: LocalS3, bucket: str, keys: Keys, attack: str
) -> None:
    writer_log = _log(s3log_server, bucket, signer=keys.signer)
    sid = _write_session(writer_log)
    checked = _log(s3log_server, bucket, verifier=keys.verifier)
    assert checked.verify(sid).entries == 12  # the genuine session verifies with the key
    assert writer_log.head(sid).sig is not None and writer_log.head(sid).sig.key_id == keys.signer.key_id

    attacker = Ed25519Signer(Ed25519PrivateKey.generate())
    _rewrite_history(s3log_server, bucket, sid, seq=3, data={"i": 3, "text": "I never said that"},
                     resign=attacker if attack == "resigned" else None, keep_sig=attack == "kept")

    # Without the key, the forgery is a perfectly good chain: the hash chain alone anchors nothing.
    plain = _log(s3log_server, bucket)
    assert plain.verify(sid).entries == 12
    assert plain.read(sid).entries[3].data["text"] == "I never said that"

    with pytest.raises(SignatureError) as err:
        checked.verify(sid)
    exc = err.value
    assert exc.session == sid and sid in str(exc)
    if attack == "unsigned":
        assert exc.key_id is None and "unsigned" in str(exc) and keys.signer.key_id in str(exc)
    elif attack == "resigned":
        assert exc.key_id == attacker.key_id and "unknown key" in str(exc) and attacker.key_id in str(exc)
    else:
        assert exc.key_id == keys.signer.key_id and "bad signature" in str(exc) and keys.signer.key_id in str(exc)
    assert isinstance(exc, s3log.CorruptionError)  # callers catching corruption catch this too


def test_forging_the_trusted_key_id_is_a_bad_signature(s3log_server: LocalS3, bucket: str,
                                                      ed_key: Ed25519PrivateKey) -> None:
    signer = Ed25519Signer(ed_key)
    sid = _write_session(_log(s3log_server, bucket, signer=signer), 4)
    # The attacker signs with their own key but writes the trusted key's id into the head.
    impostor = Ed25519Signer(Ed25519PrivateKey.generate(), key_id=signer.key_id)
    _rewrite_history(s3log_server, bucket, sid, seq=1, data="forged", resign=impostor)
    with pytest.raises(SignatureError, match="bad signature") as err:
        _log(s3log_server, bucket, verifier=PublicKeyVerifier([signer.public_key])).read(sid)
    assert err.value.key_id == signer.key_id


def test_every_read_path_checks_the_signature(s3log_server: LocalS3, bucket: str, ed_key: Ed25519PrivateKey) -> None:
    sid = _write_session(_log(s3log_server, bucket), 3)  # written unsigned
    log = _log(s3log_server, bucket, verifier=PublicKeyVerifier([ed_key.public_key()]))
    for call in (log.read, log.verify, log.head, log.open, log.lineage, log.fork):
        with pytest.raises(SignatureError):
            call(sid)
    with pytest.raises(SignatureError):
        log._run(read.load_suffix(log.layout, sid, lambda es: len(es) >= 1))
    rows = log._run(listing.list_head_rows(log.layout, [sid]))
    assert rows[0].head is None and "unsigned" in (rows[0].error or "")
    assert [i.session_id for i in log.list_sessions()] == [sid]  # listed, as a broken row


def test_a_writer_rereading_a_forged_head_refuses_it(s3log_server: LocalS3, bucket: str,
                                                     ed_key: Ed25519PrivateKey) -> None:
    signer = Ed25519Signer(ed_key)
    log = _log(s3log_server, bucket, signer=signer, verifier=PublicKeyVerifier([signer.public_key]))
    w = log.create()
    for i in range(4):
        w.append("m", i)
        w.commit()
    _rewrite_history(s3log_server, bucket, w.session_id, seq=0, data="forged")
    w.append("m", 99)
    with pytest.raises(SignatureError):  # not a fork built on a forged head
        w.commit()


def test_fork_and_create_sign_their_heads(s3log_server: LocalS3, bucket: str, ed_key: Ed25519PrivateKey) -> None:
    signer = Ed25519Signer(ed_key)
    log = _log(s3log_server, bucket, signer=signer, verifier=PublicKeyVerifier([signer.public_key]))
    empty = log.create().session_id
    assert log.head(empty).sig is not None and log.verify(empty).entries == 0
    sid = _write_session(log, 3)
    child = log.fork(sid, at_seq=1)
    assert log.head(child).sig is not None and log.read(child).parent is not None
    assert [s.session for s in log.lineage(child)] == [child, sid]


def test_a_writer_without_a_signer_drops_the_stale_signature(s3log_server: LocalS3, bucket: str,
                                                             ed_key: Ed25519PrivateKey) -> None:
    sid = _write_session(_log(s3log_server, bucket, signer=Ed25519Signer(ed_key)), 2)
    unsigned = _log(s3log_server, bucket)
    w = unsigned.open(sid)
    w.append("m", "more")
    w.commit()
    # A signature carried over from the head it continued would vouch for other content.
    assert unsigned.head(sid).sig is None


async def test_async_log_signs_and_verifies(ed_key: Ed25519PrivateKey) -> None:
    from s3log.aio import AsyncLog

    store = s3log.AsyncMemoryStore()
    signer = Ed25519Signer(ed_key)
    alog = AsyncLog(store, config=s3log.LogConfig(signer=signer, tail_per_commit=0, tail_max_bytes=300))
    w = await alog.create()
    for i in range(6):
        await w.append_durable("m", {"i": i})
    checked = AsyncLog(store, config=s3log.LogConfig(verifier=PublicKeyVerifier([signer.public_key])))
    assert len((await checked.read(w.session_id)).entries) == 6
    other = AsyncLog(store, config=s3log.LogConfig(verifier=PublicKeyVerifier([Ed25519PrivateKey.generate()
                                                                               .public_key()])))
    with pytest.raises(SignatureError, match="unknown key"):
        await other.read(w.session_id)


# --------------------------------------------------------------------------- rotation


def test_key_rotation_heads_by_either_key_verify(s3log_server: LocalS3, bucket: str) -> None:
    a = Ed25519Signer(Ed25519PrivateKey.generate())
    kms = _kms(s3log_server)
    b = KmsSigner(kms, _kms_key(s3log_server))
    old = _write_session(_log(s3log_server, bucket, signer=a), 3)
    rotated = _write_session(_log(s3log_server, bucket, signer=a), 2)
    w = _log(s3log_server, bucket, signer=b).open(rotated)  # continued after the rotation
    w.append("m", "after rotation")
    w.commit()
    new = _write_session(_log(s3log_server, bucket, signer=b), 2)
    assert _log(s3log_server, bucket).head(rotated).sig.key_id == b.key_id  # type: ignore[union-attr]

    both_keys = AnyVerifier(PublicKeyVerifier([a.public_key]), KmsVerifier(kms, b.key_id))
    both = _log(s3log_server, bucket, verifier=both_keys)
    for sid in (old, rotated, new):
        both.verify(sid)
    only_b = _log(s3log_server, bucket, verifier=KmsVerifier(kms, b.key_id))
    only_b.verify(rotated)
    with pytest.raises(SignatureError, match="unknown key") as err:
        only_b.verify(old)
    assert err.value.key_id == a.key_id and b.key_id in str(err.value)


def test_kms_signatures_verify_offline_with_the_exported_public_key(s3log_server: LocalS3, bucket: str) -> None:
    kms = _kms(s3log_server)
    for spec in ("ECC_NIST_P256", "RSA_2048"):
        signer = KmsSigner(kms, _kms_key(s3log_server, spec))
        sid = _write_session(_log(s3log_server, bucket, signer=signer), 2)
        der = kms.get_public_key(KeyId=signer.key_id)["PublicKey"]
        pub = serialization.load_der_public_key(der)
        offline = PublicKeyVerifier({signer.key_id: pub})  # type: ignore[dict-item]
        assert _log(s3log_server, bucket, verifier=offline).verify(sid).entries == 2


def test_bad_kms_keys_are_refused_up_front_and_kms_failures_write_nothing(s3log_server: LocalS3, bucket: str) -> None:
    kms = _kms(s3log_server)
    with pytest.raises(s3log.S3LogError, match="alias/no-such-key"):
        KmsSigner(kms, "alias/no-such-key")
    enc = kms.create_key(KeyUsage="ENCRYPT_DECRYPT", KeySpec="SYMMETRIC_DEFAULT")["KeyMetadata"]["KeyId"]
    with pytest.raises(ValueError, match="SIGN_VERIFY"):
        KmsSigner(kms, enc)

    class Broken:
        """A KMS client whose Sign fails (throttled, key disabled, network down)."""

        def describe_key(self, KeyId: str) -> Any:  # noqa: N803 - boto3's argument name
            return kms.describe_key(KeyId=KeyId)

        def sign(self, **kw: Any) -> Any:
            raise OSError("connection refused")

    signer = KmsSigner(Broken(), _kms_key(s3log_server))
    log = _log(s3log_server, bucket, signer=signer)
    w = log.create(lazy=True)
    w.append("m", 1)
    with pytest.raises(SigningError, match="could not sign"):
        w.commit()
    assert log.list_session_ids() == []  # nothing written


# -------------------------------------------------------------------- payload spec


def _signs_payload(head: Any, signer: Ed25519Signer, more: dict[str, Any]) -> bytes:
    """The documented payload of ``head`` (no parent, empty meta, a memory log) with the
    ``more`` keys: what ``head_payload`` gives and what ``head.sig`` signs."""
    expected = cbor2.dumps({
        "purpose": "s3log/head", "v": head.v, "session": head.session, "seq": head.seq, "hash": head.hash,
        "parent": None, "meta_digest": hashlib.sha256(cbor2.dumps({}, canonical=True)).digest(),
        "alg": "Ed25519", "key_id": signer.key_id, "log": "memory/s3log", **more,
    }, canonical=True)
    assert head_payload(head, ED25519, signer.key_id, "memory/s3log") == expected
    signer.public_key.verify(head.sig.value, expected)
    return expected


def test_a_head_with_append_keys_signs_their_digest_too(ed_key: Ed25519PrivateKey) -> None:
    signer = Ed25519Signer(ed_key)
    log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(signer=signer))
    w = log.create()
    w.append_durable("m", "hi", key="req-1")
    head = log.head(w.session_id)
    assert head.append_keys and head.sig is not None
    # docs/format.md, "Signed heads": an eleventh key, after meta_digest (longer).
    window = [[a.key, a.seq, a.digest] for a in head.append_keys]
    expected = _signs_payload(head, signer, {
        "append_keys_digest": hashlib.sha256(cbor2.dumps(window, canonical=True)).digest(),
    })
    assert expected[:1] == b"\xab"  # eleven pairs


def test_a_compacted_head_signs_its_mark_with_the_sessions_creation(ed_key: Ed25519PrivateKey) -> None:
    signer = Ed25519Signer(ed_key)
    log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(signer=signer))
    w = log.create()
    w.append("m", "a")
    w.append("m", "b")
    w.commit()
    assert log.compact(w.session_id, lambda history, head: history[1:])
    log.open(w.session_id).append_durable("m", "c", key="req-1")  # the next head keeps the mark
    head = log.head(w.session_id)
    assert head.extra.get("compacted") and head.append_keys and head.creator and head.sig is not None
    # docs/format.md, "Signed heads": a twelfth key, between meta_digest and append_keys_digest.
    mark = cbor2.dumps([head.extra["compacted"], head.created_at, head.creator], canonical=True)
    expected = _signs_payload(head, signer, {
        "compacted_digest": hashlib.sha256(mark).digest(),
        "append_keys_digest": hashlib.sha256(cbor2.dumps([a.to_list() for a in head.append_keys],
                                                         canonical=True)).digest(),
    })
    assert expected[:1] == b"\xac"  # twelve pairs


def test_payload_is_the_documented_canonical_cbor_map(ed_key: Ed25519PrivateKey) -> None:
    signer = Ed25519Signer(ed_key)
    log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(signer=signer))
    w = log.create(meta={"b": 2, "a": [1, "x"]})
    w.append("m", "hi")
    w.commit()
    child = log.fork(w.session_id)
    head = log.head(child)
    assert head.parent is not None and head.sig is not None
    # docs/format.md, "Signed heads", rebuilt independently of s3log.signing.
    expected = cbor2.dumps({
        "purpose": "s3log/head", "v": head.v, "session": child, "seq": head.seq, "hash": head.hash,
        "parent": {"session": head.parent.session, "seq": head.parent.seq, "hash": head.parent.hash,
                   "reason": head.parent.reason},
        "meta_digest": hashlib.sha256(cbor2.dumps(head.meta, canonical=True)).digest(),
        "alg": "Ed25519", "key_id": signer.key_id, "log": "memory/s3log",
    }, canonical=True)
    assert log.log_id == "memory/s3log"  # <bucket>/<prefix> by default
    assert head_payload(head, ED25519, signer.key_id, "memory/s3log") == expected
    assert expected[:1] == b"\xaa"  # ten pairs
    signer.public_key.verify(head.sig.value, expected)  # plain Ed25519 over those bytes
    raw = signer.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert signer.key_id == key_id_for(signer.public_key) == "ed25519:" + hashlib.sha256(raw).hexdigest()[:32]
    # alg and key id are inside the payload: relabelling a signature breaks it, even for
    # a reader that trusts the very same public key under the new id.
    relabelled = replace(head, sig=Signature(head.sig.alg, "ed25519:other", head.sig.value))
    layout = Layout(verifier=PublicKeyVerifier({"ed25519:other": signer.public_key}), log_id="memory/s3log")
    with pytest.raises(SignatureError, match="bad signature"):
        run_direct(MemoryStore(), read.check_head(layout, relabelled, child, layout.head(child)))


# ------------------------------------------------------------------------ checkpoints


def test_checkpoints_catch_what_the_signing_key_holder_rewrites(s3log_server: LocalS3, bucket: str,
                                                                ed_key: Ed25519PrivateKey) -> None:
    signer = Ed25519Signer(ed_key)
    verifier = PublicKeyVerifier([signer.public_key])
    sid = _write_session(_log(s3log_server, bucket, signer=signer), 6)
    vault = _store(s3log_server, s3log_server.create_bucket())  # another bucket (Object Lock in production)
    checked = _log(s3log_server, bucket, verifier=verifier)
    written = Checkpointer(vault, signer).checkpoint(checked)
    assert [(c.session, c.seq) for c in written] == [(sid, 5)]
    assert Checkpointer(vault, signer).checkpoint(checked) == []  # nothing new: nothing written
    assert check_checkpoints(checked, vault, verifier).checkpoints == 1

    # The holder of the signing key rewrites history and signs it: the signature holds...
    _rewrite_history(s3log_server, bucket, sid, seq=2, data="rewritten", resign=signer)
    checked.verify(sid)
    # ...but the checkpoint, out of their reach, does not.
    with pytest.raises(CheckpointError, match="entry 5 has hash") as err:
        check_checkpoints(checked, vault, verifier)
    assert err.value.session == sid


def test_checkpoints_catch_an_old_signed_head_put_back(s3log_server: LocalS3, bucket: str,
                                                       ed_key: Ed25519PrivateKey) -> None:
    signer = Ed25519Signer(ed_key)
    verifier = PublicKeyVerifier([signer.public_key])
    log = _log(s3log_server, bucket, signer=signer, verifier=verifier)
    w = log.create()
    w.append("m", "kept")
    w.commit()
    client = s3log_server.client()
    key = log.layout.head(w.session_id)
    old_head = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    w.append("m", "to be hidden")
    w.commit()
    vault = _store(s3log_server, s3log_server.create_bucket())
    Checkpointer(vault, signer, prefix="cp").checkpoint(log)
    client.put_object(Bucket=bucket, Key=key, Body=old_head)  # roll back: a genuine, signed, older head
    assert log.verify(w.session_id).entries == 1  # the signature cannot tell
    with pytest.raises(CheckpointError, match="ends at seq 0"):
        check_checkpoints(log, vault, verifier, prefix="cp")


def test_a_forged_checkpoint_is_refused(s3log_server: LocalS3, bucket: str, ed_key: Ed25519PrivateKey) -> None:
    signer = Ed25519Signer(ed_key)
    log = _log(s3log_server, bucket, signer=signer)
    _write_session(log, 2)
    vault = _store(s3log_server, s3log_server.create_bucket())
    Checkpointer(vault, Ed25519Signer(Ed25519PrivateKey.generate())).checkpoint(log)
    with pytest.raises(SignatureError, match="unknown key"):
        check_checkpoints(log, vault, PublicKeyVerifier([signer.public_key]))


# -------------------------------------------------------------------------------- CLI


@pytest.fixture
def cli_env(s3log_server: LocalS3, bucket: str) -> dict[str, str]:
    return {**os.environ, **s3log_server.env(), "S3LOG_BUCKET": bucket, "S3LOG_PREFIX": "s3log"}


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "s3log.cli", "verify", *args], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def pem(tmp_path: Path, ed_key: Ed25519PrivateKey) -> Iterator[str]:
    path = tmp_path / "heads.pub.pem"
    path.write_bytes(ed_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo))
    yield str(path)


def test_cli_verify_with_a_public_key(s3log_server: LocalS3, bucket: str, cli_env: dict[str, str], pem: str,
                                      ed_key: Ed25519PrivateKey) -> None:
    log = _log(s3log_server, bucket, signer=Ed25519Signer(ed_key))
    good = _write_session(log, 3)
    bad = _write_session(log, 3)
    _rewrite_history(s3log_server, bucket, bad, seq=0, data="forged")

    assert _cli(cli_env, "--all").returncode == 0  # without a key the forgery passes
    proc = _cli(cli_env, good, "--public-key", pem)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "1 verified, 0 broken" in proc.stdout
    proc = _cli(cli_env, bad, "--public-key", pem)
    assert proc.returncode == 1 and bad in proc.stdout and "unsigned" in proc.stdout
    proc = _cli(cli_env, "--all", "--public-key", pem)
    assert proc.returncode == 1 and "1 verified, 1 broken" in proc.stdout and bad in proc.stdout


def test_cli_verify_with_a_kms_key(s3log_server: LocalS3, bucket: str, cli_env: dict[str, str]) -> None:
    kms = _kms(s3log_server)
    key = _kms_key(s3log_server)
    signer = KmsSigner(kms, key)
    log = _log(s3log_server, bucket, signer=signer)
    good = _write_session(log, 2)
    bad = _write_session(log, 2)
    _rewrite_history(s3log_server, bucket, bad, seq=1, data="forged", keep_sig=True)
    proc = _cli(cli_env, good, "--kms-key-id", key)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    proc = _cli(cli_env, "--all", "--kms-key-id", key)
    assert proc.returncode == 1 and "1 verified, 1 broken" in proc.stdout
    assert bad in proc.stdout and signer.key_id in proc.stdout and "bad signature" in proc.stdout


def test_cli_verify_refuses_an_unreadable_key_file(cli_env: dict[str, str], tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key")
    proc = _cli(cli_env, "--all", "--public-key", str(junk))
    assert proc.returncode != 0 and "not a PEM public key" in (proc.stdout + proc.stderr)


# ----------------------------------------------------------------------------- docs


def _doc_snippets() -> list[str]:
    text = (Path(__file__).parent.parent / "docs" / "operations.md").read_text()
    section = text.split("## Signed heads and checkpoints", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in section.split("```python\n")[1:]]


def test_operations_doc_snippets_run(s3log_server: LocalS3, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    snippets = _doc_snippets()
    assert len(snippets) == 3
    # The KMS snippet uses the default client: point it at the local server's KMS.
    for k, v in s3log_server.env().items():
        monkeypatch.setenv(k, v)
    kms = _kms(s3log_server)
    aliases = {a["AliasName"] for a in kms.list_aliases()["Aliases"]}
    if "alias/s3log-heads" not in aliases:
        kms.create_alias(AliasName="alias/s3log-heads", TargetKeyId=_kms_key(s3log_server))
    for code in snippets:
        exec(compile(code, "docs/operations.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(" None") and out[1].startswith("arn:aws:kms:") and "checkpoints=1" in out[2]


def test_keys_load_from_pem_files_and_bad_keys_are_refused(tmp_path: Path, ed_key: Ed25519PrivateKey) -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    path = tmp_path / "heads.pem"
    path.write_bytes(ed_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.BestAvailableEncryption(b"pw")))
    signer = Ed25519Signer.from_pem(str(path), password=b"pw")
    assert signer.key_id == key_id_for(ed_key.public_key())
    with pytest.raises(s3log.S3LogError, match="cannot read"):
        Ed25519Signer.from_pem(str(tmp_path / "missing.pem"))
    ec_key = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(ValueError, match="Ed25519PrivateKey"):
        Ed25519Signer(ec_key)  # type: ignore[arg-type]
    # A P-256 public key verifies ECDSA_SHA_256 only: a head claiming Ed25519 under its id is refused.
    v = PublicKeyVerifier({"p256": ec_key.public_key()})
    with pytest.raises(s3log.S3LogError, match="is for ECDSA_SHA_256"):
        v.verify(b"payload", Signature(ED25519, "p256", b"\0" * 64))
    v.verify(b"payload", Signature("ECDSA_SHA_256", "p256", ec_key.sign(b"payload", ec.ECDSA(hashes.SHA256()))))


# ----------------------------------------------------------------- checkpoint versions


def _memory_checkpoints(ed_key: Ed25519PrivateKey) -> tuple[s3log.Log, MemoryStore, Ed25519Signer, str]:
    signer = Ed25519Signer(ed_key)
    log = s3log.Log(MemoryStore())
    w = log.create()
    w.append("m", "x")
    w.commit()
    return log, MemoryStore(), signer, w.session_id


def _put_checkpoint(vault: MemoryStore, signer: Ed25519Signer, log: s3log.Log, sid: str, v: object,
                    log_id: str | None = "memory/s3log") -> str:
    """A checkpoint as a build writing version ``v`` stored it (payload and object alike);
    ``log_id`` None: without a log, as versions 1 and 2 were."""
    head = log.read(sid).head
    named = {} if log_id is None else {"log": log_id}
    payload = cbor2.dumps({"purpose": "s3log/checkpoint", "v": v, "session": sid, "seq": head.seq,
                           "hash": head.hash, "at": 1_700_000_000_000, "alg": signer.alg,
                           "key_id": signer.key_id, **named}, canonical=True)
    sig = signer.sign(payload)
    key = checkpoint_key("s3log-checkpoints", sid, head.seq)
    vault.put_if_absent(key, cbor2.dumps({"v": v, "session": sid, "seq": head.seq, "hash": head.hash,
                                          "at": 1_700_000_000_000, "sig": sig.to_map(), **named}, canonical=True))
    return key


def test_checkpoints_are_written_as_version_3_naming_their_log(ed_key: Ed25519PrivateKey) -> None:
    log, vault, signer, sid = _memory_checkpoints(ed_key)
    (cp,) = Checkpointer(vault, signer).checkpoint(log)
    stored = cbor2.loads(vault.get(checkpoint_key("s3log-checkpoints", sid, 0)).body)
    assert stored["v"] == 3 and cp.v == 3 and stored["log"] == cp.log == "memory/s3log"
    assert cbor2.loads(cp.payload()) == {"purpose": "s3log/checkpoint", "v": 3, "log": "memory/s3log",
                                         "session": sid, "seq": 0, "hash": cp.hash, "at": cp.at,
                                         "alg": ED25519, "key_id": signer.key_id}
    assert check_checkpoints(log, vault, PublicKeyVerifier([signer.public_key])).checkpoints == 1
    # The same key, payload as documented, written by hand: it checks too.
    log2, vault2, _, sid2 = _memory_checkpoints(ed_key)
    _put_checkpoint(vault2, signer, log2, sid2, 3)
    assert check_checkpoints(log2, vault2, PublicKeyVerifier([signer.public_key])).checkpoints == 1


@pytest.mark.parametrize("v", [1, 2])
def test_checkpoints_that_name_no_log_are_refused(ed_key: Ed25519PrivateKey, v: int) -> None:
    # Versions 1 and 2 (never released) did not name their log: one could be passed off
    # as another log's checkpoint of a session of the same id. Refused, naming the key.
    log, vault, signer, sid = _memory_checkpoints(ed_key)
    key = _put_checkpoint(vault, signer, log, sid, v, log_id=None)
    with pytest.raises(CorruptionError, match=f"checkpoint version {v} names no log") as err:
        check_checkpoints(log, vault, PublicKeyVerifier([signer.public_key]))
    assert err.value.key == key


def test_a_checkpoint_of_another_log_is_refused(ed_key: Ed25519PrivateKey) -> None:
    # Two logs sharing a checkpoint prefix and a session id: tenant-a's checkpoint is
    # not evidence about tenant-b's session (nor can its signature be reused for it).
    log, vault, signer, sid = _memory_checkpoints(ed_key)
    key = _put_checkpoint(vault, signer, log, sid, 3, log_id="memory/tenant-a")
    with pytest.raises(SignatureError, match="it checkpoints log 'memory/tenant-a', not this log 'memory/s3log'"):
        check_checkpoints(log, vault, PublicKeyVerifier([signer.public_key]))
    # Relabelled as this log's, the signature no longer matches.
    stored = cbor2.loads(vault.get(key).body)
    vault2 = MemoryStore()
    vault2.put_if_absent(key, cbor2.dumps({**stored, "log": "memory/s3log"}, canonical=True))
    with pytest.raises(SignatureError, match="bad signature"):
        check_checkpoints(log, vault2, PublicKeyVerifier([signer.public_key]))


@pytest.mark.parametrize("v", [4, 0, "1", None])
def test_a_checkpoint_of_an_unknown_version_is_corrupt_naming_its_key(ed_key: Ed25519PrivateKey, v: object) -> None:
    log, vault, signer, sid = _memory_checkpoints(ed_key)
    key = _put_checkpoint(vault, signer, log, sid, v)
    with pytest.raises(CorruptionError, match="checkpoint version") as err:
        check_checkpoints(log, vault, PublicKeyVerifier([signer.public_key]))
    assert err.value.key == key


def test_every_cli_read_trusts_the_keys_given_to_s3log(s3log_server: LocalS3, bucket: str, cli_env: dict[str, str],
                                                       pem: str, ed_key: Ed25519PrivateKey, tmp_path: Path) -> None:
    # Only `verify` took keys: `show`, `tail`, `export` and `query` read a session its
    # keys' holder never signed as any other.
    import json

    from typer.testing import CliRunner

    from s3log.cli.app import app

    good = _write_session(_log(s3log_server, bucket, signer=Ed25519Signer(ed_key)), 3)
    unsigned = _write_session(_log(s3log_server, bucket), 2)

    def run(*args: str) -> Any:
        return CliRunner().invoke(app, ["--public-key", pem, *args], env=cli_env)

    assert run("show", good).exit_code == 0
    for verb in ("show", "tail"):
        result = run(verb, unsigned)
        assert result.exit_code == 1 and "unsigned" in result.output, (verb, result.output)
        assert CliRunner().invoke(app, [verb, unsigned], env=cli_env).exit_code == 0  # no keys: read
    result = run("verify", unsigned)
    assert result.exit_code == 1 and "1 broken" in result.output
    out = tmp_path / "export"
    result = run("export", "--format", "jsonl", "--out", str(out), "-q")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for f in out.rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert {r["session"] for r in rows} == {good}
    result = run("query", "SELECT DISTINCT session FROM entries", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [{"session": good}]


# ------------------------------------------------------------- pickling (Dask workers)


def test_pickled_public_key_and_any_verifiers_verify_the_same_signatures() -> None:
    import pickle

    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.hashes import SHA256

    from s3log.signing import ECDSA_SHA_256, RSASSA_PSS_SHA_256, SignatureRejected

    ed = Ed25519PrivateKey.generate()
    p256 = ec.generate_private_key(ec.SECP256R1())
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    payload = b"the signed payload"
    sigs = [
        Signature(ED25519, key_id_for(ed.public_key()), ed.sign(payload)),
        Signature(ECDSA_SHA_256, "arn:aws:kms:p256", p256.sign(payload, ec.ECDSA(SHA256()))),
        Signature(RSASSA_PSS_SHA_256, "arn:aws:kms:rsa", rsa_key.sign(
            payload, padding.PSS(padding.MGF1(SHA256()), 32), SHA256())),
    ]
    by_ed = PublicKeyVerifier([ed.public_key()])
    by_kms_keys = PublicKeyVerifier({"arn:aws:kms:p256": p256.public_key(), "arn:aws:kms:rsa": rsa_key.public_key()})
    both = AnyVerifier(by_ed, by_kms_keys)
    stranger = Ed25519PrivateKey.generate()
    for original in (by_ed, by_kms_keys, both):
        copy = pickle.loads(pickle.dumps(original))
        assert type(copy) is type(original) and copy.key_ids == original.key_ids
        assert b"PRIVATE" not in pickle.dumps(original)
        for v in (original, copy):
            for sig in sigs:
                if sig.key_id not in original.key_ids:
                    with pytest.raises(SignatureRejected, match="unknown key"):
                        v.verify(payload, sig)
                    continue
                v.verify(payload, sig)
                with pytest.raises(SignatureRejected, match="bad signature"):
                    v.verify(payload + b"!", sig)
            forged = Signature(ED25519, key_id_for(ed.public_key()), stranger.sign(payload))
            if forged.key_id in original.key_ids:
                with pytest.raises(SignatureRejected, match="bad signature"):
                    v.verify(payload, forged)


def test_a_kms_verifier_refuses_to_pickle(s3log_server: LocalS3) -> None:
    import pickle

    kms = KmsVerifier(_kms(s3log_server), _kms_key(s3log_server))
    with pytest.raises(TypeError, match=r"PublicKeyVerifier\(\{arn: public_key\}\)"):
        pickle.dumps(kms)
    with pytest.raises(TypeError, match="KmsVerifier does not pickle"):
        pickle.dumps(AnyVerifier(kms))


def test_a_kms_verifier_still_copies(s3log_server: LocalS3) -> None:
    # Refusing to pickle must not refuse copy.copy / copy.deepcopy (a config holding one).
    import copy

    v = KmsVerifier(_kms(s3log_server), _kms_key(s3log_server))
    assert copy.copy(v) is v and copy.deepcopy({"v": v})["v"] is v


# ------------------------------------------------------------------ keys off the event loop


class _SlowKey:
    """A KMS-like key: each call blocks (a network round trip) and is recorded: the
    thread it ran on, and how many calls were in flight at once.

    A call blocks until another is in flight beside it, or for ``seconds`` if none
    comes: calls run side by side meet at once, calls run one after another each
    block the whole time and never overlap."""

    blocking = True

    def __init__(self, signer: Ed25519Signer, seconds: float = 0.2) -> None:
        self._signer = signer
        self._verifier = PublicKeyVerifier([signer.public_key])
        self._seconds = seconds
        self._overlap = threading.Condition()
        self.alg, self.key_id, self.key_ids = signer.alg, signer.key_id, (signer.key_id,)
        self.threads: list[int] = []
        self.in_flight = self.max_in_flight = 0

    def _call(self) -> None:
        with self._overlap:
            self.threads.append(threading.get_ident())
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._overlap.notify_all()
            # The blocking HTTPS call (the wait lets go of the lock).
            self._overlap.wait_for(lambda: self.max_in_flight > 1, timeout=self._seconds)
            self.in_flight -= 1

    def sign(self, payload: bytes) -> Signature:
        self._call()
        return self._signer.sign(payload)

    def verify(self, payload: bytes, sig: Signature) -> None:
        self._call()
        self._verifier.verify(payload, sig)


async def test_an_async_log_signs_and_verifies_with_a_blocking_key_off_its_event_loop(
        ed_key: Ed25519PrivateKey) -> None:
    from s3log.aio import AsyncLog

    store = s3log.AsyncMemoryStore()
    key = _SlowKey(Ed25519Signer(ed_key))
    alog = AsyncLog(store, config=s3log.LogConfig(signer=key, verifier=key))
    writers = list(await asyncio.gather(*(alog.create() for _ in range(10))))
    key.threads.clear()
    key.max_in_flight = 0
    for i, w in enumerate(writers):
        w.append("m", {"i": i})
    # Ten sessions commit at once: each commit signs its head.
    await asyncio.gather(*(w.commit() for w in writers))
    loop_thread = threading.get_ident()
    assert len(key.threads) == 10 and loop_thread not in key.threads
    assert key.max_in_flight > 1  # the calls overlapped: none held up the others
    key.threads.clear()
    key.max_in_flight = 0
    # Ten reads at once: each verifies its head's signature.
    views = await asyncio.gather(*(alog.read(w.session_id) for w in writers))
    assert [len(v.entries) for v in views] == [1] * 10
    assert len(key.threads) == 10 and loop_thread not in key.threads
    assert key.max_in_flight > 1


def test_pem_keys_of_an_unsupported_type_are_refused_by_name() -> None:
    """A PEM that parses but holds a key s3log cannot sign or verify with is an
    InvalidArgumentError naming the key, raised while loading it."""
    from cryptography.hazmat.primitives.asymmetric import ec

    p384 = ec.generate_private_key(ec.SECP384R1())
    private_pem = p384.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())
    public_pem = p384.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(s3log.InvalidArgumentError, match=r"private key.*Ed25519"):
        Ed25519Signer.from_pem(private_pem)
    with pytest.raises(s3log.InvalidArgumentError, match=r"public key.*unsupported public key type"):
        PublicKeyVerifier.from_pem(public_pem)
