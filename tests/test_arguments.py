"""Bad arguments to the log's verbs: an s3log error naming what was wrong, raised before
anything is written, nothing stored damaged."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

import s3log
from s3log.errors import InvalidArgumentError, S3LogError

KEY = b"k" * 32


class CountingStore(s3log.MemoryStore):
    """A MemoryStore that records every write and delete it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, str]] = []

    def put_if_absent(self, key: str, body: bytes) -> str:
        self.writes.append(("put_if_absent", key))
        return super().put_if_absent(key, body)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.writes.append(("put_if_match", key))
        return super().put_if_match(key, body, etag)

    def delete(self, key: str) -> None:
        self.writes.append(("delete", key))
        super().delete(key)

    def delete_if_match(self, key: str, etag: str) -> None:
        self.writes.append(("delete_if_match", key))
        super().delete_if_match(key, etag)


def _log(encrypted: bool = False) -> tuple[CountingStore, s3log.Log]:
    store = CountingStore()
    config = None
    if encrypted:
        from s3log.encryption import Encryption, LocalKeyProvider

        config = s3log.LogConfig(encryption=Encryption(LocalKeyProvider({"k": KEY})))
    log = s3log.Log(store, prefix="p", config=config)
    w = log.create("s1")
    w.append("k", {"a": 1})
    w.commit()
    store.writes.clear()
    return store, log




@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_create_with_an_unknown_on_conflict_is_refused_before_the_head_is_stored(encrypted: bool) -> None:
    store, log = _log(encrypted)
    with pytest.raises(Exception) as info:
        log.create("s2", on_conflict="merge")  # type: ignore[arg-type]
    assert store.writes == []
    assert isinstance(info.value, InvalidArgumentError)


def test_async_create_with_an_unknown_on_conflict_is_refused_before_the_head_is_stored() -> None:
    store = CountingStore()

    async def main() -> None:
        alog = s3log.AsyncLog(s3log.AsyncMemoryStore(store), prefix="p")
        with pytest.raises(Exception) as info:
            await alog.create("s2", on_conflict="merge")  # type: ignore[arg-type]
        assert store.writes == []
        assert isinstance(info.value, InvalidArgumentError)

    asyncio.run(main())


@pytest.mark.parametrize("call", [
    lambda log: log.append_latest("nope", [("k", 1)]),  # no create_meta: SessionNotFound
    lambda log: log.append_latest("nope", [(None, 1)], create_meta={}),
    lambda log: log.append_latest("nope", [("k", 1)], create_meta=[1]),
    lambda log: log.append_latest("nope", [("k", 1)], create_meta={}, keys=["a", "b"]),
], ids=["missing-session", "bad-kind", "bad-meta", "bad-keys"])
def test_encrypted_append_latest_stores_no_data_key_for_input_it_refuses(call: Any) -> None:
    store, log = _log(encrypted=True)
    with pytest.raises(S3LogError):
        call(log)
    assert store.writes == []


def test_shred_of_a_session_that_does_not_exist_leaves_the_id_usable() -> None:
    store, log = _log(encrypted=True)
    with pytest.raises(s3log.SessionNotFound):
        log.shred("typo")
    assert store.writes == []
    log.create("typo").append_durable("k", 1)  # no marker left to refuse the id


def test_rotate_key_of_a_session_that_does_not_exist_stores_no_key() -> None:
    store, log = _log(encrypted=True)
    with pytest.raises(s3log.SessionNotFound):
        log.rotate_key("typo")
    assert store.writes == []


# --- arguments of the wrong type or form -------------------------------------------------


@pytest.mark.parametrize("entries", [
    ("k", {"a": 1}),  # one pair, not a list of pairs
    [("k",)],
    [("k", 1, 2)],
    [{"kind": "k", "data": 1}],  # a mapping is not a pair
    [None],
    None,
], ids=["one-pair", "1-tuple", "3-tuple", "dict-unpacked-as-its-keys", "none-item", "none"])
def test_append_latest_with_entries_that_are_not_kind_data_pairs_names_entries(entries: Any) -> None:
    store, log = _log()
    with pytest.raises(InvalidArgumentError, match="entries"):
        log.append_latest("s1", entries)
    assert store.writes == []


@pytest.mark.parametrize("kwargs", [{"keys": 5}, {"after": 5}, {"after": {"session_id": "s1"}}],
                         ids=["keys-int", "after-int", "after-dict"])
def test_append_latest_with_bad_keys_or_after_names_them(kwargs: dict[str, Any]) -> None:
    store, log = _log()
    with pytest.raises(InvalidArgumentError, match=next(iter(kwargs))):
        log.append_latest("s1", [("k", 1)], **kwargs)
    assert store.writes == []


@pytest.mark.parametrize("bound", [{"since": datetime(2020, 1, 1, tzinfo=UTC)}, {"since": "2020-01-01"},
                                   {"until": "x"}], ids=["since-datetime", "since-iso", "until-text"])
@pytest.mark.parametrize("verb", ["read_window", "read_runs"])
def test_read_window_bounds_are_times_as_listings_take_them(verb: str, bound: dict[str, Any]) -> None:
    """Datetimes and ISO text are taken (as list_session_ids and analytics.scan take
    them); text that is no time is refused, naming the bound."""
    _, log = _log()
    if bound.get("until") == "x":
        with pytest.raises(InvalidArgumentError, match="until"):
            getattr(log, verb)("s1", **bound)
    else:
        assert getattr(log, verb)("s1", **bound) is not None  # the entry is after 2020


@pytest.mark.parametrize("make", [
    lambda: s3log.Log("my-bucket").read("s1"),  # type: ignore[arg-type]
    lambda: s3log.Log(None).create(),  # type: ignore[arg-type]
    lambda: s3log.Log(s3log.MemoryStore(), config={"fanout": 4}),  # type: ignore[arg-type]
    lambda: s3log.open_log("memory://x", log_config={"fanout": 4}),  # type: ignore[arg-type]
], ids=["store-str", "store-none", "config-dict", "open_log-config-dict"])
def test_log_with_a_store_or_config_of_the_wrong_type_names_it(make: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=r"store|config"):
        make()


@pytest.mark.parametrize("call", [
    lambda log: log.open("s1", on_conflict="merge"),
    lambda log: log.open("s1").renew_lease(on_conflict="merge"),
], ids=["open", "renew_lease"])
def test_unknown_on_conflict_raises_an_s3log_error_naming_it(call: Any) -> None:
    _, log = _log()
    with pytest.raises(InvalidArgumentError, match="on_conflict"):
        call(log)


@pytest.mark.parametrize("call", [
    lambda log: log.create("s2", reducer=5),
    lambda log: log.open("s1", reducer=5),
    lambda log: log.fork("s1", reducer=5),
    lambda log: s3log.Log(log.store, reducer=5).create("s3"),
], ids=["create", "open", "fork", "Log"])
def test_a_reducer_that_is_not_one_is_named(call: Any) -> None:
    store, log = _log()
    with pytest.raises(InvalidArgumentError, match="reducer"):
        call(log)
    assert store.writes == []


@pytest.mark.parametrize("call, name", [
    (lambda log: log.expire(idle_for=1, progress=5), "progress"),
    (lambda log: log.compact("s1", None), "select"),
    (lambda log: log.heads(None), "session_ids"),
    (lambda log: log.heads("s1"), "session_ids"),  # one id is not a list of its letters
], ids=["expire-progress", "compact-select", "heads-none", "heads-one-string"])
def test_log_verb_arguments_of_the_wrong_type_are_named(call: Any, name: str) -> None:
    store, log = _log()
    with pytest.raises(InvalidArgumentError, match=name):
        call(log)
    assert store.writes == []


# --- messages that name what was wrong ----------------------------------------------------


@pytest.mark.parametrize("at_hash", ["zz", "ab"], ids=["not-hex", "too-short"])
def test_fork_at_a_malformed_hash_is_an_argument_error_naming_at_hash(at_hash: str) -> None:
    store, log = _log()
    with pytest.raises(InvalidArgumentError, match="at_hash"):
        log.fork("s1", at_hash=at_hash)
    assert store.writes == []


@pytest.mark.parametrize("call", [
    lambda log: log.open("s1").append(None),
    lambda log: log.append_latest("s1", [(None, 1)]),
], ids=["append", "append_latest"])
def test_a_bad_kind_names_the_session(call: Any) -> None:
    _, log = _log()
    with pytest.raises(s3log.InvalidEntryError, match="s1"):
        call(log)
