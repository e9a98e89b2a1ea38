"""A signed head is bound to its log: the signed payload names the log's identity
(``<bucket>/<prefix>`` unless ``LogConfig(log_id=...)`` names it).

The attack: someone who can write the bucket but holds no key copies tenant-a's
genuinely signed head (and its segments) over tenant-b's session of the same id
(another prefix, or another bucket, same signing key). Session ids repeat across
prefixes by design (LangGraph thread ids, OpenAI session ids), and a head's manifest
is not signed, so the copy is a valid chain ending at a genuinely signed hash: only
the log's identity inside the payload tells a verifying reader that it is not this
log's. A deliberate copy of a whole log keeps verifying when its readers name the
identity it was signed under.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import s3log
from s3log import analytics
from s3log._format.codec import decode_head, encode_head
from s3log._format.layout import Layout
from s3log.errors import CorruptionError, InvalidArgumentError
from s3log.signing import Ed25519Signer, PublicKeyVerifier, SignatureError
from s3log.testing.plugin import LocalS3

SID = "thread-1"  # the same id in both tenants, as a framework's thread id would be


def _keys() -> tuple[Ed25519Signer, PublicKeyVerifier]:
    signer = Ed25519Signer(Ed25519PrivateKey.generate())
    return signer, PublicKeyVerifier([signer.public_key])


def _write(store: Any, prefix: str, signer: Ed25519Signer, texts: list[str], **cfg: Any) -> None:
    # A small tail: later commits flush to segments, so the head has a manifest to copy too.
    log = s3log.Log(store, prefix=prefix, config=s3log.LogConfig(signer=signer, tail_per_commit=0,
                                                                 tail_max_bytes=400, **cfg))
    w = log.create(session_id=SID, meta={"tenant": prefix})
    for text in texts:
        w.append("msg", text)
        w.commit()


def _objects(store: Any, prefix: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    token = None
    while True:
        page = store.list(f"{prefix}/sessions/{SID}/", token=token)
        out.update({o.key: store.get(o.key).body for o in page.objects})
        if page.next_token is None:
            return out
        token = page.next_token


def _transplant(src: Any, src_prefix: str, dst: Any, dst_prefix: str) -> None:
    """Copy the session's head and segments from ``src`` to ``dst`` with nothing but
    bucket access: the (unsigned) manifest is rewritten to name the copied segments."""
    for key, body in _objects(src, src_prefix).items():
        new_key = dst_prefix + key[len(src_prefix):]
        if key.endswith("/head"):
            head = decode_head(body, key)
            segs = tuple(dst_prefix + k[len(src_prefix):] for k in head.segments)
            body = encode_head(replace(head, segments=segs, pending=None))  # neither is signed
            etag = dst.get(new_key).etag
            dst.put_if_match(new_key, body, etag)
        elif "/seg/" in key:
            dst.put_if_absent(new_key, body)


def _assert_refused(log: s3log.Log, expect_log_id: str) -> None:
    """Every verifying read of the transplanted session raises SignatureError naming the log."""
    match = f"checked as a head of log '{expect_log_id}'"
    with pytest.raises(SignatureError, match=match):
        log.read(SID)
    with pytest.raises(SignatureError, match=match):
        log.verify(SID)
    with pytest.raises(SignatureError, match=match):
        log.open(SID)
    with pytest.raises(SignatureError, match=match):
        log.fork(SID)
    with pytest.raises(SignatureError, match=match):
        list(analytics.scan(log.store, [SID], prefix=log.prefix, strict=True, verifier=log.config.verifier,
                            log_id=log.config.log_id))


@pytest.mark.parametrize("texts", [["a1", "a2"], [f"tenant a says {i} " * 4 for i in range(12)]],
                         ids=["inline-only", "with-segments"])
def test_a_signed_head_transplanted_to_another_prefix_is_refused(texts: list[str]) -> None:
    signer, verifier = _keys()
    store = s3log.MemoryStore("shared")
    _write(store, "tenant-a", signer, texts)
    _write(store, "tenant-b", signer, ["b1"])
    reader_b = s3log.Log(store, prefix="tenant-b", config=s3log.LogConfig(verifier=verifier))
    assert [e.data for e in reader_b.read(SID).entries] == ["b1"]
    _transplant(store, "tenant-a", store, "tenant-b")
    # The copy is a whole, well-formed chain (a reader without keys reads tenant-a's history) ...
    assert [e.data for e in s3log.Log(store, prefix="tenant-b").read(SID).entries] == texts
    # ... but not one signed for this log.
    _assert_refused(reader_b, "shared/tenant-b")
    # Read where it was signed, the same head verifies.
    reader_a = s3log.Log(store, prefix="tenant-a", config=s3log.LogConfig(verifier=verifier))
    assert [e.data for e in reader_a.read(SID).entries] == texts


def test_a_segment_transplanted_alone_breaks_the_chain() -> None:
    # Without its head, another log's segment cannot end at this log's signed hash: the
    # chain does not link (CorruptionError; a signed head copied with it is refused above).
    signer, verifier = _keys()
    store = s3log.MemoryStore("shared")
    _write(store, "tenant-a", signer, [f"a{i} " * 20 for i in range(8)])
    _write(store, "tenant-b", signer, [f"b{i} " * 20 for i in range(8)])
    a_head = decode_head(store.get(f"tenant-a/sessions/{SID}/head").body, "a")
    b_key = f"tenant-b/sessions/{SID}/head"
    blob = store.get(b_key)
    b_head = decode_head(blob.body, b_key)
    seg = a_head.segments[0]
    copied = "tenant-b" + seg[len("tenant-a"):]
    store.put_if_absent(copied, store.get(seg).body)
    store.put_if_match(b_key, encode_head(replace(b_head, segments=(copied, *b_head.segments[1:]), pending=None)),
                       blob.etag)
    reader_b = s3log.Log(store, prefix="tenant-b", config=s3log.LogConfig(verifier=verifier))
    with pytest.raises(CorruptionError):
        reader_b.read(SID)


def test_a_signed_head_transplanted_to_another_bucket_is_refused(s3log_server: LocalS3) -> None:
    signer, verifier = _keys()
    a, b = s3log_server.create_bucket(), s3log_server.create_bucket()
    store_a = s3log.S3Store(a, endpoint_url=s3log_server.endpoint_url)
    store_b = s3log.S3Store(b, endpoint_url=s3log_server.endpoint_url)
    texts = [f"tenant a, message {i} " * 4 for i in range(10)]
    _write(store_a, "s3log", signer, texts)  # the default prefix in both buckets
    _write(store_b, "s3log", signer, ["b1"])
    _transplant(store_a, "s3log", store_b, "s3log")
    reader_b = s3log.Log(store_b, config=s3log.LogConfig(verifier=verifier))
    _assert_refused(reader_b, f"{b}/s3log")
    assert reader_b.log_id == f"{b}/s3log"


def test_a_signed_head_transplanted_between_memory_stores_is_refused() -> None:
    signer, verifier = _keys()
    store_a, store_b = s3log.MemoryStore("bucket-a"), s3log.MemoryStore("bucket-b")
    _write(store_a, "s3log", signer, ["a1", "a2"])
    _write(store_b, "s3log", signer, ["b1"])
    _transplant(store_a, "s3log", store_b, "s3log")
    _assert_refused(s3log.Log(store_b, config=s3log.LogConfig(verifier=verifier)), "bucket-b/s3log")


def _copy_bucket(server: LocalS3, src: str, dst: str) -> None:
    client = server.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=src):
        for obj in page.get("Contents", []):
            client.copy_object(Bucket=dst, Key=obj["Key"], CopySource={"Bucket": src, "Key": obj["Key"]})


def test_a_copy_of_a_whole_log_verifies_under_the_identity_it_was_signed_with(
        s3log_server: LocalS3, tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    signer, verifier = Ed25519Signer(key), PublicKeyVerifier([key.public_key()])
    orig, copy = s3log_server.create_bucket(), s3log_server.create_bucket()
    texts = [f"message {i} " * 4 for i in range(10)]
    _write(s3log.S3Store(orig, endpoint_url=s3log_server.endpoint_url), "s3log", signer, texts)
    _copy_bucket(s3log_server, orig, copy)
    store = s3log.S3Store(copy, endpoint_url=s3log_server.endpoint_url)

    # Read under its new address, the copy is refused as any transplant is ...
    with pytest.raises(SignatureError, match=f"checked as a head of log '{copy}/s3log'"):
        s3log.Log(store, config=s3log.LogConfig(verifier=verifier)).read(SID)
    # ... and verifies when the reader names the log it is a copy of.
    named = s3log.LogConfig(verifier=verifier, log_id=f"{orig}/s3log")
    reader = s3log.Log(store, config=named)
    assert reader.log_id == f"{orig}/s3log"
    assert [e.data for e in reader.read(SID).entries] == texts
    assert reader.verify(SID).entries == len(texts)
    rows = analytics.to_arrow(store, [SID], strict=True, verifier=verifier, log_id=f"{orig}/s3log")
    assert rows.num_rows == len(texts)
    # A writer continuing the copy signs under the same identity, so its heads verify alike.
    w = s3log.Log(store, config=s3log.LogConfig(signer=signer, verifier=verifier, log_id=f"{orig}/s3log")).open(SID)
    w.append("msg", "after the copy")
    w.commit()
    assert reader.read(SID).entries[-1].data == "after the copy"

    # The command line names it with --log-id (or S3LOG_LOG_ID).
    pem = tmp_path / "k.pem"
    pem.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    env = {**os.environ, **s3log_server.env(), "S3LOG_BUCKET": copy, "S3LOG_PREFIX": "s3log"}

    def cli(*args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "s3log.cli", *args], env={**env, **(extra or {})},
                              capture_output=True, text=True, timeout=120)

    proc = cli("--public-key", str(pem), "verify", "--all")
    assert proc.returncode == 1 and f"checked as a head of log '{copy}/s3log'" in proc.stdout, proc.stdout
    proc = cli("--public-key", str(pem), "--log-id", f"{orig}/s3log", "verify", "--all")
    assert proc.returncode == 0 and "1 verified, 0 broken" in proc.stdout, proc.stdout + proc.stderr
    proc = cli("verify", SID, "--public-key", str(pem), extra={"S3LOG_LOG_ID": f"{orig}/s3log"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = cli("--public-key", str(pem), "--log-id", f"{orig}/s3log", "show", SID)
    assert proc.returncode == 0 and "after the copy" in proc.stdout, proc.stdout + proc.stderr


class _NoBucket:
    """A store that names no bucket (a custom store, a wrapper that does not forward it)."""

    honours_preconditions = True

    def __init__(self) -> None:
        self._inner = s3log.MemoryStore()

    def __getattr__(self, name: str) -> Any:
        if name == "bucket":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_store_naming_no_bucket_signs_only_with_an_explicit_identity() -> None:
    signer, verifier = _keys()
    for cfg in ({"signer": signer}, {"verifier": verifier}):
        with pytest.raises(InvalidArgumentError, match="log_id"):
            s3log.Log(_NoBucket(), config=s3log.LogConfig(**cfg))  # type: ignore[arg-type]
    assert s3log.Log(_NoBucket()).log_id is None  # type: ignore[arg-type]  # unsigned logs need none
    store = _NoBucket()
    _write(store, "p", signer, ["x"], log_id="my-log")
    reader = s3log.Log(store, prefix="p", config=s3log.LogConfig(verifier=verifier, log_id="my-log"))  # type: ignore[arg-type]
    assert [e.data for e in reader.read(SID).entries] == ["x"]
    with pytest.raises(SignatureError):
        s3log.Log(store, prefix="p", config=s3log.LogConfig(verifier=verifier, log_id="other")).read(SID)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", 5, "\ud800", "x" * 1025])
def test_a_bad_log_id_is_refused_before_anything_is_written(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="log_id"):
        s3log.LogConfig(log_id=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="log_id"):
        analytics.scan(s3log.MemoryStore(), log_id=bad)  # type: ignore[arg-type]


def test_the_default_identity_is_bucket_slash_prefix() -> None:
    assert s3log.Log(s3log.MemoryStore("b"), prefix="/a/b/").log_id == "b/a/b"
    assert s3log.Log(s3log.MemoryStore("b"), prefix="").log_id == "b/"
    assert s3log.Log(s3log.MemoryStore()).log_id == "memory/s3log"
    assert s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(log_id="named")).log_id == "named"
    assert s3log.AsyncLog(s3log.AsyncMemoryStore(s3log.MemoryStore("x"))).log_id == "x/s3log"
    assert Layout("p").log_id is None  # a bare layout signs nothing


def test_dask_reads_a_copied_log_under_the_identity_it_names(s3log_server: LocalS3) -> None:
    pytest.importorskip("dask")
    from s3log.analytics.dask import read_entries, read_sessions

    signer, verifier = _keys()
    orig, copy = s3log_server.create_bucket(), s3log_server.create_bucket()
    _write(s3log.S3Store(orig, endpoint_url=s3log_server.endpoint_url), "s3log", signer, ["x", "y"])
    _copy_bucket(s3log_server, orig, copy)
    url = s3log_server.endpoint_url
    with pytest.warns(analytics.CorruptSessionWarning, match=f"checked as a head of log '{copy}/s3log'"):
        assert len(read_entries(copy, endpoint_url=url, verifier=verifier).compute(scheduler="sync")) == 0
    rows = read_entries(copy, endpoint_url=url, verifier=verifier, log_id=f"{orig}/s3log", strict=True)
    assert list(rows.compute(scheduler="sync").seq) == [0, 1]
    heads = read_sessions(copy, endpoint_url=url, verifier=verifier, log_id=f"{orig}/s3log")
    assert list(heads.compute(scheduler="sync").session) == [SID]
    with pytest.raises(InvalidArgumentError, match="log_id"):
        read_entries(copy, endpoint_url=url, verifier=verifier, log_id="")
