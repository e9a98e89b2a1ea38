"""Sessions of every shape the on-store format has, written by s3log and dumped as files,
for the independent reader of docs/format.md (tests/independent/reader.mjs, run by
tests/test_independent_reader.py).

``python -m tests.independent_sessions DIR`` writes them to DIR: each object at its
key (``DIR/s3log/sessions/...``), with ``DIR/expected.json`` (what s3log reads from
each session, in the reader's output form) and ``DIR/trusted.pem`` (the public key
the signed sessions verify with).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import cbor2
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import s3log
from s3log._format.entries import entry_data_cbor
from s3log.signing import Ed25519Signer

PREFIX = "s3log"
#: The bucket the signed session is bound to (its log is "memory/s3log"); the dump does not say.
BUCKET = "memory"

#: Data of every CBOR type a payload may hold.
ODD_DATA: list[Any] = [
    None,
    True,
    0,
    23,
    24,
    -1,
    2**53,
    2**64 - 1,
    2**64,
    -(2**64),
    -(2**64) - 5,
    2**70,
    1.5,
    0.1,
    -0.0,
    65504.0,
    1e300,
    math.inf,
    -math.inf,
    "",
    "ünïcode ✓ \u2028 😀",
    "\ufeffstarts with U+FEFF",  # a reader must not drop it as a byte order mark
    b"",
    b"\x00\xff" * 20,
    [],
    [1, [2, [3, [4]]]],
    {},
    {"b": 1, "a": 2, "aa": 3, "": None},
    {"nested": {"list": [{"x": b"\x01"}], "n": -7}},
    "x" * 300,
    list(range(30)),
]


def rep(value: Any) -> Any:
    """A decoded data item in the reader's JSON form (see tests/independent/README.md)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) <= 2**53 else {"$int": str(value)}
    if isinstance(value, float):
        if math.isnan(value):
            return {"$float": "nan"}
        if math.isinf(value):
            return {"$float": "inf" if value > 0 else "-inf"}
        return value
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, (list, tuple)):  # cbor2 gives a tag's array as a tuple
        return [rep(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: rep(v) for k, v in value.items()}
        return {"$map": [[rep(k), rep(v)] for k, v in value.items()]}
    if isinstance(value, cbor2.CBORTag):
        return {"$tag": value.tag, "value": rep(value.value)}
    raise TypeError(f"no reader form for {type(value).__name__}")


def expected(log: s3log.Log, sid: str) -> dict[str, Any]:
    """What s3log reads from ``sid``, in the reader's output form (an encrypted
    session's data as stored: its envelopes, as a reader without the key sees them)."""
    view = log._run(log._core.read(sid)) if log.config.encryption is not None else log.read(sid)
    parent = view.head.parent
    return {
        "ok": True,
        "parent": None if parent is None else {"session": parent.session, "seq": parent.seq,
                                               "hash": None if parent.hash is None else parent.hash.hex(),
                                               "reason": parent.reason},
        "entries": [
            {"seq": e.seq, "kind": e.kind, "ts": e.ts, "hash": e.hash.hex(),
             "prev": None if e.prev is None else e.prev.hex(), "data_cbor": entry_data_cbor(e).hex(),
             "data": rep(e.data)}
            for e in view.entries
        ],
    }


def _commit_each(w: Any, items: list[tuple[str, Any]], per: int) -> None:
    for i, (kind, data) in enumerate(items):
        w.append(kind, data)
        if i % per == per - 1:
            w.commit()
    w.commit()


def write_sessions(store: s3log.MemoryStore) -> tuple[dict[str, str], Ed25519PrivateKey]:
    """Write every shape into ``store``; return {name: session id} and the signing key."""
    out: dict[str, str] = {}
    v1 = s3log.LogConfig(format_version=1, tail_per_commit=0, tail_max_bytes=4 * 1024)
    v2 = s3log.LogConfig(tail_per_commit=0, tail_max_bytes=4 * 1024)
    big = {"role": "assistant", "content": "y" * 900}

    log = s3log.Log(store)
    w = s3log.Log(store, config=v2).create(meta={"labels": {"tenant": "a"}})
    _commit_each(w, [("odd", d) for d in ODD_DATA * 4] + [("\ufeffodd", "a kind starting with U+FEFF")], 7)
    out["v2_tail_and_segments"] = w.session_id

    w = log.create()
    w.append("one", {"only": 1})
    w.commit()
    out["v2_tail_only"] = w.session_id

    # Many small commits: merged segments of several levels.
    small = s3log.Log(store, config=v2)
    w = small.create()
    _commit_each(w, [("event", {"i": i, "pad": "z" * 200}) for i in range(400)], 3)
    out["v2_merged"] = w.session_id

    w = s3log.Log(store, config=v1).create()
    _commit_each(w, [("event", {"i": i, "v": 1, "pad": "p" * 150}) for i in range(150)], 4)
    out["v1_only"] = w.session_id

    # Written in version 1, continued in version 2: one chain holds both.
    w = s3log.Log(store, config=v1).create()
    _commit_each(w, [("event", {"i": i, "v": 1, "pad": "q" * 150}) for i in range(80)], 5)
    sid = w.session_id
    w = s3log.Log(store, config=v2).open(sid)
    _commit_each(w, [("event", {"i": i, "v": 2, "pad": "r" * 150}) for i in range(80, 200)], 6)
    out["v1_then_v2"] = sid

    # A head whose last commit wrote its segment beside it: `pending` set, the entries inline.
    lg = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0))  # a commit past the strict bound flushes
    w = lg.create()
    for i in range(40):
        w.append("event", {"i": i, **big})
    w.commit()
    if lg.head(w.session_id).pending is None:
        raise AssertionError("the pending-segment session has no pending segment")
    out["v2_pending"] = w.session_id

    # Batches beyond pending_max_bytes: segment first, no pending.
    w = s3log.Log(store, config=s3log.LogConfig(pending_max_bytes=0)).create()
    _commit_each(w, [("event", {"i": i, **big}) for i in range(90)], 30)
    out["v2_segment_first"] = w.session_id

    # An explicit fork, and a fork after a lost race.
    parent = out["v2_merged"]
    child = log.fork(parent, at_seq=123)
    w = log.open(child)
    _commit_each(w, [("child", {"i": i}) for i in range(10)], 4)
    out["fork_explicit"] = child

    w1 = log.create()
    w1.append("start", {"n": 0})
    w1.commit()
    w2 = log.open(w1.session_id)
    w1.append("a", {"by": 1})
    w1.commit()
    w2.append("b", {"by": 2})
    result = w2.commit()
    if result.fork is None:
        raise AssertionError("the second writer did not fork")
    out["fork_conflict_parent"] = w1.session_id
    out["fork_conflict"] = result.session_id

    # Appends with idempotency keys: the head remembers them (`append_keys`), and a fork
    # of it remembers its parent's, naming the parent session.
    w = log.create()
    for i in range(5):
        w.append("keyed", {"i": i}, key=f"req-{i}")
        w.commit()
    out["append_keys"] = w.session_id
    w = log.open(log.fork(w.session_id, at_seq=3))
    w.append("keyed", {"i": "child"}, key="req-child")
    w.commit()
    out["append_keys_fork"] = w.session_id

    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    w = s3log.Log(store, config=s3log.LogConfig(signer=Ed25519Signer(key))).create(meta={"who": "signed"})
    _commit_each(w, [("signed", {"i": i}) for i in range(12)], 5)
    out["signed"] = w.session_id
    # Signed with a window of append keys (covered by the signature), inherited by a fork.
    signed = s3log.Log(store, config=s3log.LogConfig(signer=Ed25519Signer(key)))
    w = signed.create()
    for i in range(3):
        w.append("keyed", {"i": i}, key=f"req-{i}")
        w.commit()
    out["signed_keys_parent"] = w.session_id
    w = signed.open(signed.fork(w.session_id, at_seq=1))
    w.append("keyed", {"i": "child"}, key="req-child")
    w.commit()
    out["signed_keys"] = w.session_id
    # Signed and compacted (its mark covered by the signature), then committed to again.
    w = signed.create()
    _commit_each(w, [("signed", {"i": i}) for i in range(4)], 2)
    signed.compact(w.session_id, lambda history, head: history[1:])
    signed.open(w.session_id).append_durable("signed", {"i": "after"}, key="req-after")
    out["signed_compacted"] = w.session_id

    _write_encrypted(store, out)
    lg.close()
    log.close()
    return out, key


#: The wrapping key of the encrypted sessions (the reader never needs it).
LOCAL_KEY = bytes(range(32, 64))


def _write_encrypted(store: s3log.MemoryStore, out: dict[str, str]) -> None:
    """Encrypted sessions: one with a rotated data key, a fork of it, one shredded."""
    enc = s3log.Log(store, config=s3log.LogConfig(
        tail_per_commit=0, tail_max_bytes=4 * 1024,
        encryption=s3log.Encryption(s3log.LocalKeyProvider({"local-1": LOCAL_KEY}))))
    w = enc.create()
    _commit_each(w, [("msg", {"i": i, "text": "secret " * 20}) for i in range(40)], 6)
    enc.rotate_key(w.session_id)
    w = enc.open(w.session_id)
    _commit_each(w, [("msg", {"i": i, "after": "rotation"}) for i in range(40, 50)], 4)
    out["encrypted"] = w.session_id
    w = enc.open(enc.fork(w.session_id, at_seq=30))
    _commit_each(w, [("child", {"i": i}) for i in range(5)], 2)
    out["encrypted_fork"] = w.session_id
    w = enc.create()
    _commit_each(w, [("msg", {"i": i}) for i in range(8)], 3)
    enc.shred(w.session_id)
    out["encrypted_shredded"] = w.session_id
    enc.close()


def dump(store: s3log.MemoryStore, root: Path) -> None:
    """Every object of ``store`` as a file at its key under ``root``."""
    token = None
    while True:
        page = store.list("", token=token)
        for obj in page.objects:
            path = root / obj.key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(store.get(obj.key).body)
        if page.next_token is None:
            return
        token = page.next_token


def main(root: Path) -> dict[str, str]:
    """Write the sessions under ``root`` with expected.json and trusted.pem."""
    store = s3log.MemoryStore(BUCKET)
    names, key = write_sessions(store)
    dump(store, root)
    log = s3log.Log(store)
    raw = s3log.Log(store, config=s3log.LogConfig(
        encryption=s3log.Encryption(s3log.LocalKeyProvider({"local-1": LOCAL_KEY}))))
    (root / "expected.json").write_text(json.dumps(
        {"names": names, "sessions": {sid: expected(raw if name.startswith("encrypted") else log, sid)
                                      for name, sid in names.items()}}, indent=1))
    (root / "trusted.pem").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return names


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1])), indent=1))
