"""docs/format.md is precise enough for an independent reader in another language.

tests/independent/reader.mjs is a reader written in JavaScript from docs/format.md
alone (its own CBOR decoder, node's SHA-256 and Ed25519; nothing of s3log's code).
Here it reads sessions of every shape the format has (tests/independent_sessions.py:
versions 1 and 2 and a chain of both, merged segments, a pending segment, segment
first, both kinds of fork, a signed session) and must return what s3log reads, entry
for entry and byte for byte; and for tampered copies, both readers must refuse the
tampered session and still read the others.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2
import pytest

import s3log
from s3log.errors import CorruptionError, FormatVersionError

from .independent_sessions import BUCKET, PREFIX, main

READER = Path(__file__).parent / "independent" / "reader.mjs"
NODE = shutil.which("node")

# The python machine image ships Node (Debian's nodejs); a machine without it cannot
# run the other-language reader at all.
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


def _read(root: Path, *args: str) -> dict[str, Any]:
    assert NODE is not None
    proc = subprocess.run([NODE, str(READER), str(root), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values, numbers compared as numbers (JSON has no -0.0 or int/float)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], dict[str, Any]]:
    root = tmp_path_factory.mktemp("dump")
    names = main(root)
    return root, names, json.loads((root / "expected.json").read_text())["sessions"]


def test_the_independent_reader_reads_every_shape_as_s3log_does(dump: tuple[Path, dict[str, str], Any]) -> None:
    root, names, expected = dump
    got = _read(root)
    assert set(got) == set(names.values())
    for name, sid in names.items():
        assert got[sid].get("ok") is True, (name, got[sid])
        assert _same(got[sid], expected[sid]), name
    # The shapes are what they claim: both versions, forks, a pending segment.
    assert sum(len(expected[s]["entries"]) for s in names.values()) > 1000
    assert expected[names["fork_conflict"]]["parent"]["reason"] == "conflict"
    assert expected[names["fork_explicit"]]["parent"]["seq"] == 123


def test_signed_heads_verify_with_the_trusted_key_only(dump: tuple[Path, dict[str, str], Any]) -> None:
    root, names, expected = dump
    got = _read(root, "--trusted-ed25519", str(root / "trusted.pem"), "--bucket", BUCKET)
    for name in ("signed", "signed_keys", "signed_keys_parent", "signed_compacted"):
        assert got[names[name]]["ok"] is True, got[names[name]]
        assert _same(got[names[name]], expected[names[name]])
    for name, sid in names.items():
        if not name.startswith("signed"):
            assert got[sid]["ok"] is False and "sign" in got[sid]["error"], (name, got[sid])


# ------------------------------------------------------------------------ tampering


def _edit(path: Path, change: Callable[[Any], None]) -> None:
    obj = cbor2.loads(path.read_bytes())
    change(obj)
    path.write_bytes(cbor2.dumps(obj, canonical=True))


def _head(root: Path, sid: str) -> Path:
    return root / PREFIX / "sessions" / sid / "head"


def _segments(root: Path, sid: str) -> list[Path]:
    return [root / k for k in cbor2.loads(_head(root, sid).read_bytes())["segments"]]


def _flip_in_text(data: bytes) -> bytes:
    """A byte of a text inside an encoded item changed to another letter: still CBOR."""
    i = max(data.rfind(b"z"), data.rfind(b"p"), data.rfind(b"q"), data.rfind(b"r"), data.rfind(b"y"))
    assert i > 0, data
    return data[:i] + b"A" + data[i + 1:]


def _v2_segment(root: Path, sid: str) -> Path:
    return next(p for p in _segments(root, sid) if cbor2.loads(p.read_bytes())["v"] == 2)


def _v1_segment(root: Path, sid: str) -> Path:
    return next(p for p in _segments(root, sid) if cbor2.loads(p.read_bytes())["v"] == 1)


def _append(path: Path, extra: bytes) -> None:
    path.write_bytes(path.read_bytes() + extra)


def _indefinite_map(path: Path) -> None:
    """The same map with an indefinite-length head (0xbf ... 0xff)."""
    body = path.read_bytes()
    assert 0xA0 <= body[0] < 0xB8, body[:1]  # a map of fewer than 24 keys: a one-byte head
    path.write_bytes(b"\xbf" + body[1:] + b"\xff")


def _arabic_digits(name: str) -> str:
    """The segment name with its seq's digits as ARABIC-INDIC DIGITs (which Python's
    ``int`` and regex ``\\d`` take for decimal digits)."""
    seq, rest = name.split("-", 1)
    return "".join(chr(0x660 + int(c)) for c in seq) + "-" + rest


def _rename_segment(root: Path, sid: str, i: int, rename: Callable[[str], str]) -> None:
    """Rename the head's i-th segment (object and manifest entry) with ``rename(name)``."""
    head = _head(root, sid)
    old = cbor2.loads(head.read_bytes())["segments"][i]
    new = old.rsplit("/", 1)[0] + "/" + rename(old.rsplit("/", 1)[1])
    (root / old).rename(root / new)
    _edit(head, lambda o: _at(o, "segments", i, lambda k: new))


def _seq_of_13_digits(key: str) -> str:
    """The segment key with its first seq replaced by 10^12 (13 digits)."""
    folder, name = key.rsplit("/", 1)
    return f"{folder}/{10**12}-{name.split('-', 1)[1]}"


def _truncate(path: Path, n: int) -> None:
    path.write_bytes(path.read_bytes()[:-n])


def _set(obj: Any, key: str, value: Any) -> None:
    obj[key] = value


def _at(obj: Any, key: str, i: int, change: Callable[[Any], Any]) -> None:
    obj[key][i] = change(obj[key][i])


TAMPERINGS: dict[str, tuple[str, Callable[[Path, str], None]]] = {
    "v2 segment data": ("v2_merged", lambda r, s: _edit(_v2_segment(r, s), lambda o: _at(o, "data", 1, _flip_in_text))),
    "v2 segment hash": ("v2_merged", lambda r, s: _edit(
        _v2_segment(r, s), lambda o: _at(o, "hashes", 0, lambda h: bytes(32)))),
    "v2 segment kind": ("v2_merged", lambda r, s: _edit(
        _v2_segment(r, s), lambda o: _at(o, "kinds", 2, lambda k: "x"))),
    "v1 segment entry data": ("v1_only", lambda r, s: _edit(
        _v1_segment(r, s), lambda o: _at(o, "entries", 0, lambda e: {**e, "data": {**e["data"], "i": 99}}))),
    "v1 segment in a v1+v2 chain": ("v1_then_v2", lambda r, s: _edit(
        _v1_segment(r, s), lambda o: _at(o, "entries", 1, lambda e: {**e, "ts": e["ts"] + 1}))),
    "head tail record": ("v2_tail_only", lambda r, s: _edit(
        _head(r, s), lambda o: _at(o, "tail", 0, lambda rec: rec.replace(b"only", b"onlY")))),
    "head tail hash": ("v2_pending", lambda r, s: _edit(
        _head(r, s), lambda o: _at(o, "tail_hashes", 0, lambda h: h[:-1] + bytes([h[-1] ^ 1])))),
    "listed segment missing": ("v2_segment_first", lambda r, s: _segments(r, s)[0].unlink()),
    "head seq": ("v2_tail_and_segments", lambda r, s: _edit(_head(r, s), lambda o: _set(o, "seq", o["seq"] + 1))),
    "manifest order": ("v2_merged", lambda r, s: _edit(
        _head(r, s), lambda o: _set(o, "segments", [o["segments"][1], o["segments"][0], *o["segments"][2:]]))),
    "unknown version": ("v1_only", lambda r, s: _edit(_head(r, s), lambda o: _set(o, "v", 3))),
    "segment of another session": ("v2_merged", lambda r, s: _edit(
        _v2_segment(r, s), lambda o: _set(o, "session", "someone-else"))),
    "truncated segment": ("v2_merged", lambda r, s: _truncate(_v2_segment(r, s), 9)),
    "fork parent differs from its entry": ("fork_explicit", lambda r, s: _edit(
        _head(r, s), lambda o: _set(o, "parent", {**o["parent"], "seq": o["parent"]["seq"] - 1}))),
    "malformed lease": ("v2_merged", lambda r, s: _edit(_head(r, s), lambda o: _set(o, "lease", {"owner": 1}))),
    "malformed signature": ("signed", lambda r, s: _edit(_head(r, s), lambda o: _set(o, "sig", {"alg": "Ed25519"}))),
    "malformed append_keys": ("append_keys", lambda r, s: _edit(_head(r, s), lambda o: _at(
        o, "append_keys", 0, lambda item: [item[0], item[1], b"short"]))),
    "append_keys not an array": ("append_keys", lambda r, s: _edit(_head(r, s), lambda o: _set(
        o, "append_keys", {"a": 1}))),
    "malformed pending in a v1 head": ("v1_only", lambda r, s: _edit(_head(r, s), lambda o: _set(o, "pending", []))),
    # Found by differential fuzzing against the independent reader (s3log accepted these).
    "segment key with non-ASCII digits": ("v2_merged", lambda r, s: _rename_segment(r, s, 0, _arabic_digits)),
    "negative version": ("v2_merged", lambda r, s: _edit(_head(r, s), lambda o: _set(o, "version", -1))),
    "negative created_at": ("v2_merged", lambda r, s: _edit(_head(r, s), lambda o: _set(o, "created_at", -1))),
    "negative updated_at": ("v2_merged", lambda r, s: _edit(_head(r, s), lambda o: _set(o, "updated_at", -7))),
    "negative level": ("v2_merged", lambda r, s: _edit(_head(r, s), lambda o: _at(o, "levels", 0, lambda x: -1))),
    "boolean level": ("v2_merged", lambda r, s: _edit(_head(r, s), lambda o: _at(o, "levels", 0, lambda x: True))),
    "v1 entry without prev": ("v1_only", lambda r, s: _edit(
        _segments(r, s)[0], lambda o: _at(o, "entries", 0, lambda e: {k: v for k, v in e.items() if k != "prev"}))),
    "v2 segment without prev": ("v2_merged", lambda r, s: _edit(
        _segments(r, s)[0], lambda o: o.pop("prev"))),
    "bytes after the head": ("v2_tail_only", lambda r, s: _append(_head(r, s), b"\x00")),
    "bytes after a segment": ("v2_merged", lambda r, s: _append(_segments(r, s)[0], b"\xf6")),
    "indefinite-length head": ("v2_tail_only", lambda r, s: _indefinite_map(_head(r, s))),
    "shared value in a head field": ("v2_merged", lambda r, s: _edit(
        _head(r, s), lambda o: _set(o, "writer", cbor2.CBORTag(28, o["writer"])))),
    "self-described tag around a head field": ("v2_merged", lambda r, s: _edit(
        _head(r, s), lambda o: _set(o, "session", cbor2.CBORTag(55799, o["session"])))),
    "stringref namespace in an unknown head field": ("v2_merged", lambda r, s: _edit(
        _head(r, s), lambda o: _set(o, "zz", cbor2.CBORTag(256, ["a"])))),
    "a parent on a root session": ("v2_tail_only", lambda r, s: _edit(
        _head(r, s), lambda o: _set(o, "parent", {"session": "x", "seq": 0, "hash": bytes(32), "reason": "explicit"}))),
    # A malformed tombstone was once ignored (not a map) or read as an
    # expired session (any map), and a parent naming no session id was not refused.
    **{f"malformed expired: {what}": ("v2_merged", lambda r, s, bad=bad: _edit(_head(r, s), lambda o: _set(
        o, "expired", bad(o)))) for what, bad in {
        "an int": lambda o: 5,
        "a text": lambda o: "x",
        "an array": lambda o: [1, 2],
        "an empty map": lambda o: {},
        "a text at": lambda o: {"at": "yesterday", "seq": o["seq"], "hash": o["hash"], "idle_for_ms": 1},
        "a short hash": lambda o: {"at": 1, "seq": o["seq"], "hash": b"x", "idle_for_ms": 1},
        "a negative idle_for_ms": lambda o: {"at": 1, "seq": o["seq"], "hash": o["hash"], "idle_for_ms": -1},
    }.items()},
    "parent session not a session id": ("fork_explicit", lambda r, s: _edit(
        _head(r, s), lambda o: _set(o, "parent", {**o["parent"], "session": "../../x"}))),
}


def _load(root: Path, prefix: str = PREFIX, **config: Any) -> s3log.Log:
    store = s3log.MemoryStore(BUCKET)
    for path in (root / prefix).rglob("*"):
        if path.is_file():
            store.put_if_absent(path.relative_to(root).as_posix(), path.read_bytes())
    return s3log.Log(store, prefix=prefix, config=s3log.LogConfig(**config))


def _refused_by_both(root: Path, sid: str) -> Any:
    """The independent reader (trusting ``trusted.pem``) reports ``sid`` not ok, and s3log
    refuses it with SignatureError: the reader's report of ``sid``."""
    from cryptography.hazmat.primitives import serialization

    from s3log.signing import PublicKeyVerifier, SignatureError

    got = _read(root, "--trusted-ed25519", str(root / "trusted.pem"), "--log-id", f"{BUCKET}/{PREFIX}")
    assert got[sid]["ok"] is False, got[sid]
    key = serialization.load_pem_public_key((root / "trusted.pem").read_bytes())
    reader = s3log.Log(_load(root).store, config=s3log.LogConfig(verifier=PublicKeyVerifier([key])))  # type: ignore[list-item]
    with pytest.raises(SignatureError):
        reader.read(sid)
    return got[sid]


def _changed_copy(dump: tuple[Path, dict[str, str], Any], tmp_path: Path, name: str,
                  change: Callable[[Path, str], None]) -> tuple[Path, str, dict[str, Any]]:
    """A copy of the dump with session ``name`` changed, and the independent reader's output."""
    root = tmp_path / "copy"
    shutil.copytree(dump[0], root)
    sid = dump[1][name]
    change(root, sid)
    return root, sid, _read(root)


@pytest.mark.parametrize("tampering", sorted(t for t in TAMPERINGS if "expired" in t or "session id" in t))
def test_both_readers_refuse_a_malformed_tombstone_or_parent_by_that_field(
        dump: tuple[Path, dict[str, str], Any], tmp_path: Path, tampering: str) -> None:
    # Refused for that field (not as expired, nor for a later check of the fork entry).
    root, sid, got = _changed_copy(dump, tmp_path, *TAMPERINGS[tampering])
    field = "expired" if "expired" in tampering else "session id"
    assert got[sid]["ok"] is False and "expired" not in got[sid] and field in got[sid]["error"], got[sid]
    with pytest.raises(CorruptionError, match=field):
        _load(root).read(sid)


@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
def test_both_readers_refuse_a_tampered_session(dump: tuple[Path, dict[str, str], Any], tmp_path: Path,
                                                tampering: str) -> None:
    root, sid, got = _changed_copy(dump, tmp_path, *TAMPERINGS[tampering])
    names, expected = dump[1], dump[2]
    assert got[sid]["ok"] is False and got[sid]["error"], got[sid]
    with pytest.raises((CorruptionError, FormatVersionError)):
        _load(root).read(sid)
    # The other sessions read as before.
    for other, osid in names.items():
        if osid != sid:
            assert _same(got[osid], expected[osid]), other


def _pending_segment(root: Path, sid: str) -> Path:
    key: str = cbor2.loads(_head(root, sid).read_bytes())["pending"]["key"]
    return root / key


#: Changes that leave a session readable, the same to both readers.
HARMLESS: dict[str, tuple[str, Callable[[Path, str], None]]] = {
    # "a reader never reads a pending segment"
    "pending segment missing": ("v2_pending", lambda r, s: _pending_segment(r, s).unlink()),
    # A v1 entry map's other keys are not covered by its hash and are ignored.
    "v1 entry with another key": ("v1_only", lambda r, s: _edit(
        _v1_segment(r, s), lambda o: _at(o, "entries", 0, lambda e: {**e, "note": "not hashed"}))),
    # A segment key of a seq of 10^12 or more has 13 digits or more (found by fuzzing:
    # s3log refused such a pending key).
    "pending key of a 13-digit seq": ("v2_pending", lambda r, s: _edit(_head(r, s), lambda o: _set(
        o, "pending", {**o["pending"], "key": _seq_of_13_digits(o["pending"]["key"])}))),
    # A commit counter of 0 (s3log stores 1 first) is still a uint.
    "version 0": ("v2_merged", lambda r, s: _edit(_head(r, s), lambda o: _set(o, "version", 0))),
    # Unknown head fields are ignored by readers.
    "unknown head field": ("v2_merged", lambda r, s: _edit(_head(r, s), lambda o: _set(o, "from_the_future", [1]))),
    # A null `expired` reads as absent: not a tombstone.
    "null expired": ("v2_merged", lambda r, s: _edit(_head(r, s), lambda o: _set(o, "expired", None))),
}


@pytest.mark.parametrize("change", sorted(HARMLESS))
def test_both_readers_still_read_a_session_after_a_harmless_change(
        dump: tuple[Path, dict[str, str], Any], tmp_path: Path, change: str) -> None:
    root, sid, got = _changed_copy(dump, tmp_path, *HARMLESS[change])
    expected = dump[2]
    assert _same(got[sid], expected[sid]), got[sid]
    view = _load(root).read(sid)
    assert [e.hash.hex() for e in view.entries] == [e["hash"] for e in expected[sid]["entries"]]


def test_both_readers_see_a_tombstone_as_an_expired_session(dump: tuple[Path, dict[str, str], Any],
                                                             tmp_path: Path) -> None:
    # A head with an `expired` map is an expired session's tombstone (docs/format.md,
    # "Head"); found by fuzzing: the independent reader took it for a live head.
    def expire(root: Path, sid: str) -> None:
        _edit(_head(root, sid), lambda o: _set(o, "expired", {"at": 1, "seq": o["seq"], "hash": o["hash"],
                                                              "idle_for_ms": 1}))

    root, sid, got = _changed_copy(dump, tmp_path, "v2_merged", expire)
    assert got[sid]["ok"] is False and got[sid]["expired"] is True, got[sid]
    with pytest.raises(s3log.SessionExpired):
        _load(root).read(sid)


def _tombstone(root: Path, sid: str, *, empty: bool = False, **change: Any) -> None:
    """Replace the session's head by its tombstone
    (``empty``: as for a session with no entries, whose tombstone has seq -1 and a
    hash all the same), with ``change`` applied to the stored map."""
    from dataclasses import replace

    from s3log._format.codec import decode_head, encode_head
    from tests.tombstones import tombstone

    path = _head(root, sid)
    head = decode_head(path.read_bytes(), f"{PREFIX}/sessions/{sid}/head")
    if empty:
        head = replace(head, seq=-1, hash=None, parent=None)
    tomb = tombstone(head, now=head.updated_at + 1, nonce="0" * 16, idle_for_ms=1)
    assert tomb.hash is not None and not tomb.segments and not tomb.tail
    path.write_bytes(encode_head(tomb))
    _edit(path, lambda o: o.update(change))


@pytest.mark.parametrize("empty", [False, True], ids=["with entries", "empty"])
def test_both_readers_see_the_tombstone_s3log_writes_as_an_expired_session(
        dump: tuple[Path, dict[str, str], Any], tmp_path: Path, empty: bool) -> None:
    # An empty session's tombstone has seq -1 and a hash that names no entry: not corrupt.
    root, sid, got = _changed_copy(dump, tmp_path, "v2_merged", lambda r, s: _tombstone(r, s, empty=empty))
    assert got[sid]["ok"] is False and got[sid]["expired"] is True, got[sid]
    with pytest.raises(s3log.SessionExpired):
        _load(root).read(sid)


#: A tombstone is checked as any head is (docs/format.md, "Head", `expired`).
MALFORMED_TOMBSTONES: dict[str, dict[str, Any]] = {
    "a malformed lease": {"lease": {"owner": 1}},
    "another session": {"session": "someone-else"},
    "a segment outside its folder": {"segments": ["elsewhere.cbor"], "levels": [0]},
    "no writer": {"writer": None},
    "an unknown version": {"v": 3},
}


@pytest.mark.parametrize("what", sorted(MALFORMED_TOMBSTONES))
def test_both_readers_refuse_a_tombstone_with_a_malformed_head(
        dump: tuple[Path, dict[str, str], Any], tmp_path: Path, what: str) -> None:
    change = MALFORMED_TOMBSTONES[what]
    root, sid, got = _changed_copy(dump, tmp_path, "v2_merged", lambda r, s: _tombstone(r, s, **change))
    assert got[sid]["ok"] is False and "expired" not in got[sid], got[sid]
    with pytest.raises((CorruptionError, FormatVersionError)):
        _load(root).read(sid)


def test_with_trusted_keys_both_readers_refuse_an_unsigned_tombstone(
        dump: tuple[Path, dict[str, str], Any], tmp_path: Path) -> None:
    root, sid, _ = _changed_copy(dump, tmp_path, "signed", _tombstone)
    report = _refused_by_both(root, sid)
    assert "expired" not in report and "sign" in report["error"], report


@pytest.mark.parametrize("change", ["an item's seq", "an item added", "the window dropped"])
def test_with_trusted_keys_both_readers_refuse_a_signed_head_whose_append_keys_changed(
        dump: tuple[Path, dict[str, str], Any], tmp_path: Path, change: str) -> None:
    # The window answers retries with stored entries: it is signed with the head.

    def edit(obj: Any) -> None:
        if change == "an item's seq":
            obj["append_keys"][-1][1] = 0
        elif change == "an item added":
            obj["append_keys"].append(["forged", 0, bytes(16)])
        else:
            del obj["append_keys"]

    root, sid, _ = _changed_copy(dump, tmp_path, "signed_keys", lambda r, s: _edit(_head(r, s), edit))
    report = _refused_by_both(root, sid)
    assert "not a valid signature" in report["error"], report


@pytest.mark.parametrize("change", ["the mark's last tip", "the mark dropped", "created_at", "creator"])
def test_with_trusted_keys_both_readers_refuse_a_signed_head_whose_compaction_mark_changed(
        dump: tuple[Path, dict[str, str], Any], tmp_path: Path, change: str) -> None:
    # A writer settling a lost reply acknowledges what the mark names (for the session
    # its creation names): both are signed with the head.

    def edit(obj: Any) -> None:
        if change == "the mark's last tip":
            obj["compacted"]["tips"][-1] = bytes(16)
        elif change == "the mark dropped":
            del obj["compacted"]
        elif change == "created_at":
            obj["created_at"] += 1
        else:
            obj["creator"] = "someone-else"

    root, sid, _ = _changed_copy(dump, tmp_path, "signed_compacted", lambda r, s: _edit(_head(r, s), edit))
    report = _refused_by_both(root, sid)
    assert "not a valid signature" in report["error"], report


# ------------------------------------------------------- signed heads name their log


def _verifier(root: Path) -> Any:
    from cryptography.hazmat.primitives import serialization

    from s3log.signing import PublicKeyVerifier

    return PublicKeyVerifier([serialization.load_pem_public_key((root / "trusted.pem").read_bytes())])  # type: ignore[list-item]


def _transplant(root: Path, sid: str, prefix: str) -> None:
    """The signed session copied, head and segments, to the same id under ``prefix``, its
    head's (unsigned) segment keys rewritten to point there: what bucket access allows."""
    src = root / PREFIX / "sessions" / sid
    dst = root / prefix / "sessions" / sid
    shutil.copytree(src, dst)
    _edit(dst / "head", lambda o: _set(o, "segments", [k.replace(f"{PREFIX}/", f"{prefix}/", 1)
                                                        for k in o["segments"]]))


def test_both_readers_refuse_a_signed_head_of_another_log(dump: tuple[Path, dict[str, str], Any],
                                                         tmp_path: Path) -> None:
    from s3log.signing import SignatureError

    root = tmp_path / "copy"
    shutil.copytree(dump[0], root)
    sid = dump[1]["signed"]
    _transplant(root, sid, "tenant-b")
    pem = str(root / "trusted.pem")
    # Read where it was signed, it verifies; transplanted to another prefix, or read as a
    # head of another bucket's log, it does not (both readers).
    assert _read(root, "--trusted-ed25519", pem, "--bucket", BUCKET, "--session", sid)[sid]["ok"] is True
    assert _read(root, "--prefix", "tenant-b", "--session", sid)[sid]["ok"] is True  # the chain itself is intact
    for args in (("--prefix", "tenant-b", "--bucket", BUCKET), ("--bucket", "other-bucket"),
                 ("--log-id", f"other-bucket/{PREFIX}")):
        got = _read(root, "--trusted-ed25519", pem, *args, "--session", sid)[sid]
        assert got["ok"] is False and "not a valid signature" in got["error"], (args, got)
    _load(root, verifier=_verifier(root)).read(sid)
    with pytest.raises(SignatureError, match="checked as a head of log 'memory/tenant-b'"):
        _load(root, "tenant-b", verifier=_verifier(root)).read(sid)
    with pytest.raises(SignatureError, match="bad signature"):
        _load(root, verifier=_verifier(root), log_id=f"other-bucket/{PREFIX}").read(sid)
    # A copy of the whole log read under the identity it was signed with verifies in both.
    assert _read(root, "--prefix", "tenant-b", "--trusted-ed25519", pem, "--log-id", f"{BUCKET}/{PREFIX}",
                 "--session", sid)[sid]["ok"] is True
    _load(root, "tenant-b", verifier=_verifier(root), log_id=f"{BUCKET}/{PREFIX}").read(sid)


def test_the_independent_reader_needs_the_log_to_check_signatures(dump: tuple[Path, dict[str, str], Any]) -> None:
    assert NODE is not None
    proc = subprocess.run([NODE, str(READER), str(dump[0]), "--trusted-ed25519", str(dump[0] / "trusted.pem")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--bucket or --log-id" in proc.stderr


def test_the_independent_reader_verifies_encrypted_sessions_without_their_key(
        dump: tuple[Path, dict[str, str], Any]) -> None:
    """Encrypted sessions, one with a rotated data key, a fork and a shredded one: the
    reader, which has no key, verifies each chain and sees each entry's data as the
    envelope docs/format.md specifies ("Encrypted sessions")."""
    root, names, expected = dump
    got = _read(root, *[a for name in ("encrypted", "encrypted_fork", "encrypted_shredded")
                        for a in ("--session", names[name])])
    for name in ("encrypted", "encrypted_fork", "encrypted_shredded"):
        sid = names[name]
        assert got[sid]["ok"] is True and _same(got[sid], expected[sid]), name
        sealed = [e["data"] for e in got[sid]["entries"] if e["kind"] != "s3log.fork"]
        assert sealed and all(d["$tag"] == 21299 and len(d["value"]) == 3 for d in sealed), name
    refs = {e["data"]["value"][0] for e in got[names["encrypted"]]["entries"]}
    assert refs == {f"{names['encrypted']}/000001", f"{names['encrypted']}/000002"}
    shredded = root / PREFIX / "keys" / names["encrypted_shredded"]
    assert [p.name for p in shredded.iterdir()] == ["shredded"]  # its data key is gone
