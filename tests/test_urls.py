"""s3log.open_log / open_async_log: one URL names the store and the prefix."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import s3log
from s3log._format.values import Entry
from s3log.testing.localserver import LocalS3
from s3log.urls import InvalidURLError, parse_url


def _keys(server: LocalS3, bucket: str) -> list[str]:
    """The session objects in ``bucket`` (the activity index and probe objects left out)."""
    resp = server.client().list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in resp.get("Contents", [])
                  if "/activity/" not in "/" + o["Key"] and "_probe/" not in o["Key"])


def test_open_log_writes_under_the_url_prefix_on_the_endpoint_it_names(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    log = s3log.open_log(f"s3://{bucket}/team/a?endpoint={s3log_server.endpoint_url}&region=us-east-1")
    assert isinstance(log, s3log.Log) and isinstance(log.store, s3log.S3Store)
    assert log.prefix == "team/a"
    w = log.create()
    w.append("note", {"n": 1})
    w.commit()
    assert _keys(s3log_server, bucket) == [f"team/a/sessions/{w.session_id}/head"]
    # A second log opened from the same URL reads what the first wrote.
    again = s3log.open_log(f"s3://{bucket}/team/a/?endpoint={s3log_server.endpoint_url}")
    assert [e.data for e in again.read(w.session_id).entries] == [{"n": 1}]
    log.close()
    again.close()


def test_a_url_without_a_path_is_the_bucket_root(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    log = s3log.open_log(f"s3://{bucket}?endpoint={s3log_server.endpoint_url}")
    w = log.create()
    w.commit()
    assert _keys(s3log_server, bucket) == [f"sessions/{w.session_id}/head"]
    log.close()


def test_the_default_prefix_of_s3store_is_reached_with_an_explicit_path(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    plain = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    w = plain.create()
    w.append("k", 1)
    w.commit()
    log = s3log.open_log(f"s3://{bucket}/s3log?endpoint={s3log_server.endpoint_url}")
    assert log.list_session_ids() == [w.session_id]
    plain.close()
    log.close()


def test_the_endpoint_comes_from_the_environment_when_the_url_has_none(s3log_server: LocalS3) -> None:
    # s3log_server points AWS_ENDPOINT_URL at itself; boto3 honours it.
    bucket = s3log_server.create_bucket()
    before = s3log_server.request_count
    log = s3log.open_log(f"s3://{bucket}/p")
    log.create().commit()
    assert s3log_server.request_count > before
    assert len(_keys(s3log_server, bucket)) == 1
    log.close()


def test_store_obstore_selects_the_obstore_store(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    log = s3log.open_log(f"s3://{bucket}/fast?endpoint={s3log_server.endpoint_url}&store=obstore")
    assert isinstance(log.store, s3log.ObstoreStore)
    w = log.create()
    w.append("k", "v")
    w.commit()
    assert _keys(s3log_server, bucket) == [f"fast/sessions/{w.session_id}/head"]
    log.close()


@pytest.mark.parametrize("store", ["boto3", "obstore"])
def test_open_async_log_over_http(s3log_server: LocalS3, store: str) -> None:
    bucket = s3log_server.create_bucket()
    url = f"s3://{bucket}/async?endpoint={s3log_server.endpoint_url}&store={store}"

    async def scenario() -> str:
        alog = s3log.open_async_log(url)
        assert isinstance(alog, s3log.AsyncLog)
        expected = s3log.AsyncS3Store if store == "boto3" else s3log.AsyncObstoreStore
        assert isinstance(alog.store, expected)
        w = await alog.create()
        await w.append_durable("k", 1)
        view = await alog.read(w.session_id)
        assert [e.data for e in view.entries] == [1]
        if hasattr(alog.store, "aclose"):
            await alog.store.aclose()
        return str(w.session_id)

    sid = asyncio.run(scenario())
    assert _keys(s3log_server, bucket) == [f"async/sessions/{sid}/head"]


def test_memory_url_is_a_fresh_store_with_the_prefix() -> None:
    log = s3log.open_log("memory://tests/one")
    assert isinstance(log.store, s3log.MemoryStore)
    w = log.create()
    w.commit()
    assert [k for k in log.store.all_keys() if "/sessions/" in k] == [f"tests/one/sessions/{w.session_id}/head"]
    # Each memory:// URL is a new store: nothing is shared between two of them.
    assert s3log.open_log("memory://tests/one").list_session_ids() == []
    assert s3log.open_log("memory://").prefix == ""


def test_memory_async_log() -> None:
    async def scenario() -> list[Any]:
        alog = s3log.open_async_log("memory://x")
        assert isinstance(alog.store, s3log.AsyncMemoryStore)
        w = await alog.create()
        await w.append_durable("k", 2)
        return [e.data for e in (await alog.read(w.session_id)).entries]

    assert asyncio.run(scenario()) == [2]


class _Count:
    """A reducer counting entries (to see that open_log passes it on)."""

    def initial(self) -> int:
        return 0

    def apply(self, state: int, entry: Entry) -> int:
        return state + 1

    def to_seed(self, state: int) -> Any:
        return state

    def from_seed(self, seed: Any) -> int:
        return int(seed)


def test_log_config_and_reducer_are_passed_to_the_log() -> None:
    config = s3log.LogConfig(tail_max_bytes=1234, fanout=3)
    log = s3log.open_log("memory://", log_config=config, reducer=_Count())
    assert log.config is config
    w = log.create()
    w.append("a", 1)
    w.append("b", 2)
    w.commit()
    assert w.state == 2

    alog = s3log.open_async_log("memory://", log_config=config)
    assert alog.config is config


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("", "empty"),
        ("bucket/prefix", "no scheme"),
        ("gs://bucket/p", "unknown scheme 'gs'"),
        ("s3:///prefix", "no bucket"),
        ("s3://bucket:9000/p", "a port belongs in ?endpoint="),
        ("s3://bad%20bucket/p", "not a valid bucket name"),
        ("s3://b/p?endpint=http://x", "unknown parameter 'endpint'"),
        ("s3://b/p?endpoint=127.0.0.1:9000", "not an http:// or https:// URL"),
        ("s3://b/p?endpoint=http://[::1", "is not a URL"),
        ("s3://b/p?endpoint=http://h:port", "is not a URL"),
        ("s3://b/p?endpoint=http://a&endpoint=http://b", "given twice"),
        ("s3://b/p?region=", "'region' is empty"),
        ("s3://b/p?region=US_EAST", "not a region name"),
        ("s3://b/p?store=rust", "store 'rust' is not one of boto3, obstore"),
        ("s3://b/p?store=", "'store' is empty"),
        ("s3://b/p?store", "malformed query string"),
        ("s3://b/p#frag", "fragment"),
        ("memory://p?store=obstore", "memory:// takes no parameters"),
        ("az://Logs/p", "not an Azure container name"),
        ("az://ab/p", "not an Azure container name"),
        ("az://logs/p?region=westeurope", "unknown parameter 'region': expected account, endpoint"),
        ("az://logs/p?account=My_Account", "not an Azure storage account name"),
        ("az://logs/p?endpoint=ftp://x", "not an http:// or https:// URL"),
    ],
)
def test_bad_urls_name_the_url_and_the_problem(s3log_server: LocalS3, url: str, reason: str) -> None:
    before = s3log_server.request_count
    for opener in (s3log.open_log, s3log.open_async_log):
        with pytest.raises(InvalidURLError) as info:
            opener(url)
        err = info.value
        assert isinstance(err, ValueError) and isinstance(err, s3log.S3LogError)
        assert reason in str(err)
        assert repr(url) in str(err)
    # Refused before any store was built or any request made.
    assert s3log_server.request_count == before


def test_credentials_in_the_url_are_refused_and_not_echoed() -> None:
    with pytest.raises(InvalidURLError) as info:
        s3log.open_log("s3://AKIAEXAMPLE:s3cr3t@bucket/p")
    assert "credentials do not belong in the URL" in str(info.value)
    assert "s3cr3t" not in str(info.value) and "AKIAEXAMPLE" not in str(info.value)


def test_a_non_string_url_is_refused() -> None:
    with pytest.raises(InvalidURLError, match="expected a string"):
        parse_url(42)  # type: ignore[arg-type]


def test_percent_escapes_in_the_prefix_are_decoded() -> None:
    spec = parse_url("s3://b/a%20b/c?region=eu-west-1")
    assert (spec.bucket, spec.prefix, spec.region, spec.store) == ("b", "a b/c", "eu-west-1", "boto3")


def test_every_default_prefix_is_the_one_constant() -> None:
    """The logs, the command line and the key layout default to one prefix, ``DEFAULT_PREFIX``."""
    import inspect

    from s3log._format.layout import DEFAULT_PREFIX, Layout
    from s3log.cli.app import _main as cli_main
    from s3log.cli.common import Settings

    assert s3log.Log(s3log.MemoryStore()).layout.prefix == DEFAULT_PREFIX
    assert s3log.AsyncLog(s3log.AsyncMemoryStore()).layout.prefix == DEFAULT_PREFIX
    assert Layout().prefix == DEFAULT_PREFIX and Settings().prefix == DEFAULT_PREFIX
    assert inspect.signature(cli_main).parameters["prefix"].default.default == DEFAULT_PREFIX


def test_an_az_url_names_the_container_prefix_account_and_endpoint() -> None:
    spec = parse_url("az://logs/team/a?account=devstoreaccount1&endpoint=http://127.0.0.1:10000/devstoreaccount1")
    assert (spec.scheme, spec.bucket, spec.prefix, spec.account) == ("az", "logs", "team/a", "devstoreaccount1")
    assert spec.endpoint == "http://127.0.0.1:10000/devstoreaccount1"
    assert parse_url("az://logs").prefix == ""


@pytest.mark.stores
def test_open_log_on_an_az_url_writes_to_azurite(azurite: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from s3log.store.azure import AsyncAzureStore, AzureStore
    from tests.servers import AZURITE_ACCOUNT, AZURITE_KEY

    # The key comes from the environment (obstore reads it), never from the URL.
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY)
    container = azurite.create_container()
    url = f"az://{container}/team/a?account={AZURITE_ACCOUNT}&endpoint={azurite.account_url()}"
    log = s3log.open_log(url)
    assert isinstance(log.store, AzureStore) and log.prefix == "team/a"
    w = log.create()
    w.append("note", {"n": 1})
    w.commit()
    listed = [o.key for o in log.store.list("team/a/sessions/").objects if "_probe/" not in o.key]
    assert listed == [f"team/a/sessions/{w.session_id}/head"]

    async def read() -> list[Any]:
        alog = s3log.open_async_log(url)
        assert isinstance(alog.store, AsyncAzureStore)
        return [e.data for e in (await alog.read(w.session_id)).entries]

    assert asyncio.run(read()) == [{"n": 1}]


def test_a_directory_bucket_name_is_a_bucket_name() -> None:
    # S3 Express One Zone: boto3 resolves the zonal endpoint and session itself (docs/stores.md).
    spec = parse_url("s3://logs--usw2-az1--x-s3/team?region=us-west-2")
    assert (spec.bucket, spec.prefix, spec.region) == ("logs--usw2-az1--x-s3", "team", "us-west-2")
