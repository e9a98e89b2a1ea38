"""The DuckDB views stream with bounded memory, a snapshot reads the store once, and
the analytics entry points open a store from a URL and a ``storage_options`` dict."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("duckdb")
import duckdb

import s3log
from s3log import analytics
from s3log.analytics import sql
from s3log.testing.localserver import LocalS3

#: Entries of about 1 KiB, as agent transcripts hold.
TEXT = "x" * 1000


def _store(sessions: int = 12, entries: int = 40) -> tuple[s3log.MemoryStore, list[str]]:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    ids = []
    for s in range(sessions):
        w = log.create(meta={"labels": {"n": str(s)}})
        for i in range(entries):
            w.append("message", {"i": i, "text": TEXT})
        w.commit()
        ids.append(w.session_id)
    return store, ids


def test_the_views_stream_batches_bounded_in_rows_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    store, _ = _store(sessions=60)
    seen: list[tuple[int, int]] = []
    scan = sql.scan

    @functools.wraps(scan)  # the same options checked
    def recording(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for b in scan(*args, **kwargs):
            seen.append((b.num_rows, sum(map(len, b.column("data_cbor").to_pylist()))))
            yield b

    monkeypatch.setattr(sql, "scan", recording)
    con = analytics.duckdb(duckdb.connect(), store)
    # What DuckDB reads is a stream it pulls batches from, not a table.
    assert all(isinstance(s, sql.LazyBatches) for s in sql._streams[con])
    assert con.execute("SELECT count(*) FROM entries").fetchone() == (60 * 40,)
    # 2,400 rows of ~1 KiB (2.4 MiB): never one batch of the lot; each cut at the byte
    # bound once a session (40 KiB) takes it over.
    assert len(seen) > 1
    assert max(rows for rows, _ in seen) <= analytics.VIEW_BATCH_SIZE
    assert max(size for _, size in seen) <= analytics.VIEW_BATCH_BYTES + 40 * 1100


def test_the_sessions_view_holds_at_most_parallelism_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    store, ids = _store(sessions=40, entries=3)
    asked: list[int] = []
    heads = s3log.Log.heads

    def recording(self: s3log.Log, session_ids: Any) -> Any:
        asked.append(len(session_ids))
        return heads(self, session_ids)

    monkeypatch.setattr(s3log.Log, "heads", recording)
    store.requests.reset()
    table = analytics.sessions_table(store, parallelism=8, batch_size=1000)
    assert table.num_rows == 40 and sorted(table.column("session").to_pylist()) == sorted(ids)
    # A head holds its tail: read eight at a time, each made a row at once (one GET each).
    assert max(asked) <= 8 and sum(asked) == 40
    assert store.requests["GET"] == 40


def test_a_snapshot_reads_the_store_once() -> None:
    store, ids = _store(sessions=5, entries=4)
    con = analytics.duckdb(duckdb.connect(), store, snapshot=True)
    first = store.requests.snapshot()
    query = "SELECT s.labels['n'] AS n, count(*) FROM entries e JOIN sessions s USING (session) GROUP BY ALL ORDER BY n"
    rows = con.execute(query).fetchall()
    assert rows == [(str(i), 4) for i in range(5)]
    # A second writer's entries are not seen, and no query makes a request.
    w = s3log.Log(store).open(ids[0])
    w.append("message", {"late": True})
    w.commit()
    store.requests.reset()
    assert con.execute(query).fetchall() == rows
    assert con.execute("SELECT count(*) FROM entries").fetchall() == [(20,)]
    assert store.requests.snapshot() == dict.fromkeys(first, 0)
    # Registered again (as views this time), the store is read afresh.
    analytics.duckdb(con, store)
    assert con.execute("SELECT count(*) FROM entries").fetchall() == [(21,)]
    # And back to a snapshot: a view and a table of one name never collide.
    analytics.duckdb(con, store, snapshot=True)
    assert con.execute("SELECT count(*) FROM entries").fetchall() == [(21,)]


def test_the_views_and_the_snapshot_agree() -> None:
    store, _ = _store(sessions=6, entries=5)
    lazy = analytics.duckdb(duckdb.connect(), store)
    snap = analytics.duckdb(duckdb.connect(), store, snapshot=True)
    q = "SELECT session, seq, kind, hash, data_json FROM entries ORDER BY session, seq"
    assert lazy.execute(q).fetchall() == snap.execute(q).fetchall()


def test_storage_options_open_the_store_a_url_names(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url), prefix="agents")
    w = log.create()
    w.append("message", {"i": 1})
    w.commit()
    # As a deltalake or obstore user writes them (either case, with or without AWS_).
    options = {"AWS_ENDPOINT_URL": s3log_server.endpoint_url, "AWS_REGION": "us-east-1",
               "aws_access_key_id": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ALLOW_HTTP": "true"}
    url = f"s3://{bucket}/agents"
    table = analytics.to_arrow(url, storage_options=options)
    assert table.column("session").to_pylist() == [w.session_id]
    assert analytics.sessions_table(url, storage_options=options).num_rows == 1
    con = analytics.duckdb(duckdb.connect(), url, storage_options=options)
    assert con.execute("SELECT count(*) FROM entries JOIN sessions USING (session)").fetchone() == (1,)


@pytest.mark.parametrize(("store", "options", "named"), [
    ("s3://b/p", {"AWS_ENDPOINT": "http://x", "AWS_BOGUS": "1"}, "storage_options"),
    ("s3://b/p", {"AWS_REGION": 3}, "storage_options"),
    ("s3://b/p", ["AWS_REGION"], "storage_options"),
    (s3log.MemoryStore(), {"AWS_REGION": "us-east-1"}, "storage_options"),
    ("memory://p", None, "store"),
])
def test_bad_storage_options_are_refused_before_any_request(store: Any, options: Any, named: str) -> None:
    with pytest.raises(s3log.InvalidArgumentError) as caught:
        analytics.scan(store, storage_options=options)
    assert caught.value.argument == named


def test_dask_takes_storage_options_as_plain_values(s3log_server: LocalS3) -> None:
    pytest.importorskip("dask")
    import dask

    from s3log.analytics.dask import read_entries, read_sessions

    bucket = s3log_server.create_bucket()
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    w = log.create()
    w.append("message", {"i": 1})
    w.commit()
    options = {"AWS_ENDPOINT_URL": s3log_server.endpoint_url, "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    df = read_entries(bucket, storage_options=options)
    with dask.config.set(scheduler="sync"):
        assert df.compute()["session"].tolist() == [w.session_id]
        assert read_sessions(bucket, storage_options=options).compute()["session"].tolist() == [w.session_id]
    with pytest.raises(s3log.InvalidArgumentError, match="AWS_BOGUS"):
        read_entries(bucket, storage_options={"AWS_BOGUS": "1"})
    with pytest.raises(s3log.InvalidArgumentError, match="fast"):
        read_entries(bucket, fast=True, storage_options=options)
