"""Readers refuse what docs/format.md says is corrupt, with a CorruptionError and never
another exception: cases found by differential fuzzing of s3log against the
independent reader (tests/independent/reader.mjs) that the shared tampering table of
tests/test_independent_reader.py cannot express (the two readers may differ there). A
malformed tombstone or a parent naming no session id makes the head corrupt, and ``verify``
says so, naming the key.
"""

from __future__ import annotations

from typing import Any

import cbor2
import pytest

import s3log
from s3log._format.cbor import _map_with_raw, dumps
from s3log._format.codec import decode_segment
from s3log._format.entries import entry_bytes, make_entry
from s3log._format.layout import Layout, parse_segment_key
from s3log._format.values import ParentRef
from s3log.errors import CorruptionError
from s3log.testing.plugin import LocalS3
from tests.cli_env import edit_head_mem, edit_head_s3, invoke, log_of, strict_json
from tests.helpers import one_entry, parent_and_fork


def _v1_session_with_data(item: bytes) -> tuple[s3log.Log, str]:
    """A version 1 session whose one entry's data is the CBOR ``item``, hashed right."""
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(format_version=1))
    w = one_entry(log)
    # The record laid out around the item as stored (not decoded and encoded again here).
    entry = make_entry(0, None, "k", 5, None, data_cbor=item)
    key = log.layout.head(w.session_id)
    blob = store.get(key)
    head: dict[str, Any] = cbor2.loads(blob.body)
    del head["tail"]
    head.update(seq=0, hash=entry.hash, ts_min=5, ts_max=5)
    store.put_if_match(key, _map_with_raw(head, {"tail": b"\x81" + entry_bytes(entry)}), blob.etag)
    return log, w.session_id


def test_v1_data_the_decoder_cannot_encode_again_is_corrupt_not_a_crash() -> None:
    # Tag 36 (a MIME message): cbor2 decodes it to an email.message.Message, which it
    # cannot encode again, so the v1 hash could not be checked and read() raised
    # cbor2.CBOREncodeError.
    log, sid = _v1_session_with_data(bytes.fromhex("d8246161"))
    with pytest.raises(CorruptionError, match="cannot be encoded again") as err:
        log.read(sid)
    assert err.value.seq == 0


def test_v1_data_that_encodes_again_still_reads() -> None:
    log, sid = _v1_session_with_data(dumps({"a": [1, 2.5, "x"]}))
    assert log.read(sid).entries[0].data == {"a": [1, 2.5, "x"]}


@pytest.mark.parametrize("parent", [
    {"session": "p", "seq": True, "hash": None, "reason": "explicit"},  # a bool is not a seq
    {"session": "p", "seq": 3, "reason": "explicit"},  # hash absent (null is a value, absent is not)
])
def test_malformed_parent_pointers_are_refused(parent: dict[str, Any]) -> None:
    with pytest.raises(CorruptionError, match="parent"):
        ParentRef.from_map(parent, "k")


def test_segment_keys_are_read_as_written() -> None:
    layout = Layout("s3log")
    h = bytes(range(32))
    for seq in (0, 10**12 - 1, 10**12, 10**15 + 7):
        key = layout.segment("s", seq, h, "0123456789abcdef")
        assert parse_segment_key(key) == (seq, h)
        assert layout.is_segment_of("s", key)
    good = layout.segment("s", 5, h, "0123456789abcdef")
    name = good.rsplit("/", 1)[1]
    for bad in (
        "\u0660" * 11 + "\u0665" + name[12:],  # ARABIC-INDIC DIGITs: int() reads them, the format does not
        "0" + name,  # 13 digits with a leading zero: a second spelling of seq 5
        name[1:],  # 11 digits
    ):
        key = good.rsplit("/", 1)[0] + "/" + bad
        assert parse_segment_key(key) is None, bad
        assert not layout.is_segment_of("s", key)


@pytest.mark.parametrize("extra", [b"\x00", b"\xf6\xf6", b"\x50" + b"z" * 16])
def test_bytes_after_a_segment_are_corrupt(extra: bytes) -> None:
    from s3log._format.codec import encode_segment

    body = encode_segment("s", [make_entry(0, None, "k", 1, {"a": 1})])
    assert decode_segment(body, "seg").entries[0].data == {"a": 1}
    with pytest.raises(CorruptionError, match="exactly one CBOR data item"):
        decode_segment(body + extra, "seg")
    with pytest.raises(CorruptionError):
        decode_segment(body[:-1], "seg")


# ------------------------------------------------- what is appended reads back (the promise)

#: Data that CBOR gives back in another form. Before, append took it and commit
#: acknowledged it; then the session no longer read: a version 1 reader hashes the data
#: as encoded again (a different hash), and every reader refuses tags 28 and 29 (and,
#: in a head or segment, 55799 and 256).
UNSTABLE = {
    "self-described (55799)": cbor2.CBORTag(55799, 1),
    "nested self-described": {"x": [cbor2.CBORTag(55799, "y")]},
    "stringref namespace (256)": cbor2.CBORTag(256, ["a"]),
    "shared value (28)": cbor2.CBORTag(28, [1]),
    "epoch time as a tag (1)": cbor2.CBORTag(1, 5),
}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("name", sorted(UNSTABLE))
def test_data_that_would_not_read_back_is_refused_at_append(version: int, name: str) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(format_version=version))
    w = log.create()
    w.append("ok", 1)
    w.commit()
    before = log.head(w.session_id)
    with pytest.raises(s3log.InvalidEntryError, match="does not read back") as err:
        w.append("odd", UNSTABLE[name])
    assert err.value.kind == "odd"
    w.commit()  # nothing was queued: nothing is written
    assert log.head(w.session_id) == before
    assert [e.data for e in log.read(w.session_id).entries] == [1]


@pytest.mark.parametrize("version", [1, 2])
def test_tagged_values_that_read_back_are_kept(version: int) -> None:
    import datetime
    import decimal
    import fractions
    import uuid

    values = [cbor2.CBORTag(99, 5), datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC), {1, 2},
              decimal.Decimal("1.5"), uuid.UUID(int=5), fractions.Fraction(1, 3)]
    log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(format_version=version,
                                                                tail_per_commit=0, tail_max_bytes=1024))
    w = log.create()
    for v in values:
        w.append("tagged", v)
        w.commit()
    for _ in range(20):  # past the tail bound: the entries are read from segments too
        w.append("pad", "x" * 100)
        w.commit()
    assert log.head(w.session_id).segments
    assert [e.data for e in log.read(w.session_id).entries[: len(values)]] == values


@pytest.mark.parametrize("bad", [5, "x", [1, 2], {}, {"at": "yesterday"}, True,
                                 {"at": 1, "seq": 0, "hash": b"short", "idle_for_ms": 1},
                                 {"at": -1, "seq": 0, "hash": None, "idle_for_ms": 1},
                                 {"at": 1, "seq": 0, "hash": None, "idle_for_ms": "5"}])
def test_a_malformed_expired_field_makes_the_head_corrupt(bad: Any) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = one_entry(log)
    key = edit_head_mem(store, w.session_id, {"expired": bad})
    with pytest.raises(CorruptionError, match="expired") as info:
        log.read(w.session_id)
    assert info.value.key == key


def test_a_well_formed_or_null_expired_field_reads_as_before() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = one_entry(log)
    edit_head_mem(store, w.session_id, {"expired": None})
    assert len(log.read(w.session_id)) == 1
    edit_head_mem(store, w.session_id, {"expired": {"at": 1, "seq": 0, "hash": None, "idle_for_ms": 5}})
    with pytest.raises(s3log.SessionExpired):
        log.read(w.session_id)


def test_verify_counts_a_malformed_tombstone_as_broken(env: dict[str, str], s3log_server: LocalS3) -> None:
    log = log_of(env)
    w = one_entry(log)
    key = edit_head_s3(env, s3log_server, w.session_id, {"expired": {"at": "yesterday"}})
    result = invoke(env, "verify", "--all", "--json")
    report = strict_json(result.stdout)
    assert result.exit_code == 1 and report["expired_or_deleted"] == []
    assert [(b["session"], b["key"]) for b in report["broken"]] == [(w.session_id, key)]


def test_a_parent_naming_no_session_id_is_corruption_naming_the_head() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    _parent, child = parent_and_fork(log)
    head = cbor2.loads(store.get(f"s3log/sessions/{child}/head").body)
    key = edit_head_mem(store, child, {"parent": {**head["parent"], "session": "../../x"}})
    for call in (log.lineage, log.read):
        with pytest.raises(CorruptionError, match="session id") as info:
            call(child)
        assert info.value.key == key


def test_verify_json_names_the_key_of_a_format_version_error(env: dict[str, str], s3log_server: LocalS3) -> None:
    log = log_of(env)
    w = one_entry(log)
    key = edit_head_s3(env, s3log_server, w.session_id, {"v": 3})
    result = invoke(env, "verify", w.session_id, "--json")
    report = strict_json(result.stdout)
    assert result.exit_code == 1 and report["broken"][0]["key"] == key
    assert "format version" in report["broken"][0]["error"]
