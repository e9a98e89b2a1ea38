"""An export with mode overwrite replaces the old one only once the whole scan is written.

Before: ``to_parquet(mode="overwrite")`` and ``s3log export --mode overwrite`` checked
their arguments and read the first batch, then deleted the old export and wrote the
new one in its place: a scan failing after its first batch (a store fault, a strict
scan's corrupt session) left the old export gone and the new one partial. Now the new
export is written elsewhere (a hidden sibling directory locally, a hidden folder
inside the target on S3) and swapped in at the end; a failure deletes only that.
Each test here failed before. Every argument (and the bucket) is checked before anything
is deleted.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

from typer.testing import CliRunner

import s3log
from s3log import analytics
from s3log.analytics import reading
from s3log.cli.app import app
from s3log.testing.plugin import LocalS3
from tests.cli_env import log_of
from tests.helpers import store_with

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY = 86_400_000
runner = CliRunner()


def _contents(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _populate(log: s3log.Log, n: int = 3) -> list[str]:
    """``n`` sessions, one entry each, on days T0, T0 + 1 day, ..."""
    ids = []
    for i in range(n):
        w = log.create()
        w.append("k", {"i": i}, ts=T0 + i * DAY)
        w.commit()
        ids.append(w.session_id)
    return ids


#: A scan that reads the sessions in order, one batch per entry: the first batches come
#: from sound sessions, and a strict scan fails at the corrupt last one.
FAILING_LATE = {"strict": True, "parallelism": 1, "batch_size": 1}


def test_a_local_overwrite_whose_scan_fails_part_way_keeps_the_old_export(tmp_path: Path) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    ids = _populate(log)
    out = tmp_path / "export"
    assert analytics.to_parquet(store, str(out)) == 3
    before = _contents(out)
    store.put_raw(log.layout.head(ids[2]), b"not a head")
    with pytest.raises(s3log.CorruptionError):
        analytics.to_parquet(store, str(out), mode="overwrite", sessions=ids, **FAILING_LATE)
    assert _contents(out) == before, "the old export was deleted for a scan that failed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"], "the staging directory was left"


def test_a_local_overwrite_replaces_the_whole_export_at_the_end(tmp_path: Path) -> None:
    store = s3log.MemoryStore()
    _populate(s3log.Log(store))
    out = tmp_path / "export"
    analytics.to_parquet(store, str(out))
    seen: list[list[str]] = []
    # While the scan runs the old export is still there, whole.
    progress = lambda _p: seen.append(sorted(_contents(out)))  # noqa: E731
    assert analytics.to_parquet(store, str(out), mode="overwrite", progress=progress, parallelism=1,
                                batch_size=1) == 3
    assert len(seen) == 3 and all(len(s) == 4 for s in seen), seen
    assert analytics.to_parquet(store, str(out), mode="overwrite", since=T0 + 2 * DAY) == 1
    assert sorted(p.name for p in out.iterdir()) == ["_sessions.parquet", "date=2026-01-03"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    # To a directory that does not exist yet, and into an empty one, as before.
    assert analytics.to_parquet(store, str(tmp_path / "new"), mode="overwrite") == 3
    (tmp_path / "empty").mkdir()
    assert analytics.to_parquet(store, str(tmp_path / "empty"), mode="overwrite") == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "export", "new"]


def _s3_keys(server: LocalS3, bucket: str, prefix: str) -> dict[str, str]:
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def test_an_overwrite_to_s3_whose_scan_fails_part_way_keeps_the_old_export(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    store = s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url)
    log = s3log.Log(store)
    ids = _populate(log)
    assert analytics.to_parquet(store, f"s3://{bucket}/export") == 3
    before = _s3_keys(s3log_server, bucket, "export/")
    assert any("/date=2026-01-03/" in k for k in before)
    s3log_server.client().put_object(Bucket=bucket, Key=log.layout.head(ids[2]), Body=b"not a head")
    with pytest.raises(s3log.CorruptionError):
        analytics.to_parquet(store, f"s3://{bucket}/export", mode="overwrite", sessions=ids, **FAILING_LATE)
    assert _s3_keys(s3log_server, bucket, "export/") == before
    # A successful one replaces it: no stale day, nothing of the staging folder left.
    assert analytics.to_parquet(store, f"s3://{bucket}/export", mode="overwrite", sessions=ids[:1]) == 1
    after = sorted(_s3_keys(s3log_server, bucket, "export/"))
    # (pyarrow marks the folders it makes with empty "dir/" objects, as before.)
    assert [k for k in after if not k.endswith("/")] == ["export/_sessions.parquet"] + [
        k for k in after if k.startswith("export/date=2026-01-01/part-")], after
    assert {k.split("/")[1] for k in after} == {"", "_sessions.parquet", "date=2026-01-01"}, after


def _failing_after_first_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan yields one entry, then meets a store fault (a lost connection)."""
    real = reading.scan

    @functools.wraps(real)
    def scan(*args: Any, **kwargs: Any) -> Iterator[Any]:
        batches = real(*args, **kwargs)
        yield next(batches).slice(0, 1)
        batches.close()
        raise s3log.StoreError("connection reset by peer", key="s3log/sessions/x/head")

    monkeypatch.setattr(reading, "scan", scan)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_cli_export_overwrite_whose_scan_fails_part_way_keeps_the_old_export(
    env: dict[str, str], tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _populate(log_of(env))
    out = tmp_path / fmt
    result = runner.invoke(app, ["export", "--format", fmt, "--out", str(out), "-q"], env=env)
    assert result.exit_code == 0, result.output
    before = _contents(out)
    with monkeypatch.context() as patch:
        _failing_after_first_batch(patch)
        result = runner.invoke(app, ["export", "--format", fmt, "--out", str(out), "--mode", "overwrite"], env=env)
    assert result.exit_code == 1 and "connection reset" in result.output, result.output
    assert _contents(out) == before, "the old export was deleted for a scan that failed"
    assert sorted(p.name for p in tmp_path.iterdir()) == [fmt]
    args = ["export", "--format", fmt, "--out", str(out), "--mode", "overwrite", "--since", "2026-01-03", "-q"]
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    assert _contents(out) != before and sorted(p.name for p in tmp_path.iterdir()) == [fmt]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("bad", [
    {"batch_size": 0}, {"sessions": ["bad id!"]}, {"kinds": "k"}, {"since": "garbage"}, {"bogus": 1},
    {"parallelism": 0}, {"until": float("nan")}, {"prefix": "../x"},
])
def test_to_parquet_overwrite_checks_every_argument_before_deleting(tmp_path: Path, bad: dict[str, Any]) -> None:
    store, _ = store_with(T0)
    out = tmp_path / "export"
    assert analytics.to_parquet(store, str(out)) == 1
    before = _files(out)
    with pytest.raises(s3log.S3LogError):
        analytics.to_parquet(store, str(out), mode="overwrite", **bad)
    assert _files(out) == before


def test_to_parquet_overwrite_keeps_the_export_when_the_store_fails(tmp_path: Path) -> None:
    store, _ = store_with(T0)
    out = tmp_path / "export"
    analytics.to_parquet(store, str(out))
    before = _files(out)

    class Gone(s3log.MemoryStore):
        def list(self, *args: Any, **kwargs: Any) -> Any:
            raise s3log.StoreError("no such bucket", key="s3log/", code="NoSuchBucket", status=404)

    with pytest.raises(s3log.StoreError):
        analytics.to_parquet(Gone(), str(out), mode="overwrite")
    assert _files(out) == before


@pytest.mark.parametrize("path", ["", " ", ".", "..", "work/.."], ids=["empty", "blank", "dot", "parent", "dot-dot"])
def test_to_parquet_never_overwrites_the_working_directory_or_one_holding_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str,
) -> None:
    """An empty path is refused (not taken as ``.``), and so is an overwrite of the
    working directory or of a directory holding it: its files stay."""
    store, _ = store_with(T0)
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("precious")
    monkeypatch.chdir(work)
    with pytest.raises(s3log.InvalidArgumentError, match="path_or_uri"):
        analytics.to_parquet(store, path, mode="overwrite")
    assert sorted(os.listdir(tmp_path)) == ["work"]
    assert sorted(os.listdir(work)) == ["keep.txt"]


@pytest.mark.parametrize("mode", ["overwrite", "error", "append"])
def test_to_parquet_naming_a_session_that_does_not_exist_writes_nothing(tmp_path: Path, mode: str) -> None:
    """A session id with no head is a SessionNotFound naming it, raised before anything
    is written: an export to overwrite or append to stays as it was."""
    store, ids = store_with(T0)
    out = tmp_path / "export"
    assert analytics.to_parquet(store, str(out)) == 1
    before = _contents(out)
    target = out if mode != "error" else tmp_path / "new"
    with pytest.raises(s3log.SessionNotFound, match="typo"):
        analytics.to_parquet(store, str(target), mode=mode, sessions=[ids[0], "typo"])  # type: ignore[arg-type]
    assert _contents(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


@pytest.mark.parametrize("call, name", [
    (lambda st, d: analytics.to_parquet(st, None), "path_or_uri"),
    (lambda st, d: analytics.to_parquet(st, 5), "path_or_uri"),
    (lambda st, d: analytics.to_parquet(st, str(d / "o"), filesystem="local"), "filesystem"),
    (lambda st, d: list(analytics.scan(st, encryption="x")), "encryption"),
    (lambda st, d: list(analytics.scan(None)), "store"),
    (lambda st, d: analytics.to_parquet(None, str(d / "o")), "store"),
], ids=["path-none", "path-int", "filesystem-str", "scan-encryption-str", "scan-store-none", "to_parquet-store-none"])
def test_analytics_arguments_of_the_wrong_type_are_named(call: Any, name: str, tmp_path: Path) -> None:
    """An argument of the wrong type is an InvalidArgumentError naming it; nothing is written."""
    store, _ = store_with(T0)
    with pytest.raises(s3log.InvalidArgumentError, match=name):
        call(store, tmp_path)
    assert list(tmp_path.iterdir()) == []


def _invoke(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, " ".join(result.output.split())


def _populate_env(env: dict[str, str]) -> str:
    log = log_of(env)
    w = log.create()
    w.append("k", {"a": 1}, ts=T0)
    w.commit()
    log.close()
    return w.session_id


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_cli_export_overwrite_deletes_nothing_on_a_bad_option_or_bucket(
    env: dict[str, str], tmp_path: Path, fmt: str,
) -> None:
    _populate_env(env)
    out = tmp_path / fmt
    code, text = _invoke(env, "export", "--format", fmt, "--out", str(out), "-q")
    assert code == 0, text
    before = _files(out)
    assert before
    code, text = _invoke(env, "export", "--format", fmt, "--out", str(out), "--mode", "overwrite",
                         "--session", "bad id!")
    assert code == 1 and "bad id!" in text and "Traceback" not in text
    assert _files(out) == before
    missing = {**env, "S3LOG_BUCKET": "no-such-bucket-here"}
    code, text = _invoke(missing, "export", "--format", fmt, "--out", str(out), "--mode", "overwrite")
    assert code == 1 and "no-such-bucket-here" in text
    assert _files(out) == before



@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
@pytest.mark.parametrize("out, mode", [("", "overwrite"), ("", "append"), (".", "overwrite"), ("..", "overwrite")],
                         ids=["empty-overwrite", "empty-append", "dot", "parent"])
def test_cli_export_never_writes_over_the_working_directory(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, out: str, mode: str,
) -> None:
    """``--out ""`` (an unset variable) is a usage error, and so is ``--mode overwrite``
    of the working directory or one holding it: nothing is read or written."""
    _populate_env(env)
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("precious")
    monkeypatch.chdir(work)
    code, text = _invoke(env, "export", "--format", fmt, "--out", out, "--mode", mode)
    assert code == 2 and "--out" in text, text
    assert sorted(os.listdir(tmp_path)) == ["work"]
    assert sorted(os.listdir(work)) == ["keep.txt"]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_cli_export_naming_a_session_that_does_not_exist_keeps_the_export(
    env: dict[str, str], tmp_path: Path, fmt: str,
) -> None:
    """``--session`` naming a session with no head fails, naming it, before --mode
    overwrite replaces anything."""
    _populate_env(env)
    out = tmp_path / fmt
    assert _invoke(env, "export", "--format", fmt, "--out", str(out), "-q")[0] == 0
    before = _contents(out)
    code, text = _invoke(env, "export", "--format", fmt, "--out", str(out), "--mode", "overwrite",
                         "--session", "typo")
    assert code == 1 and "typo" in text and "Traceback" not in text, text
    assert _contents(out) == before


def test_an_overwrite_whose_scan_fails_leaves_no_file_of_an_upload_still_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pyarrow uploads part files in the background; one it began before the scan
    failed must not land after the staging folder is cleaned up. The server here holds
    the corrupt head until a staging upload of each sound day has begun, and their later requests
    until the export deletes something (or half a second passes)."""
    import threading

    uploading, cleaning = threading.Event(), threading.Event()
    begun: list[str] = []
    with LocalS3() as server:
        wsgi = server._server._server
        inner = wsgi.app
        corrupt = ""

        def gated(environ: Any, start_response: Any) -> Any:
            method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
            query = environ.get("QUERY_STRING", "")
            if method == "DELETE" or (method == "POST" and "delete" in query):
                cleaning.set()
            elif corrupt and method == "GET" and path.endswith(corrupt):
                uploading.wait(1.0)
            elif ".s3log-staging-" in path and path.endswith(".parquet"):
                if query == "uploads":
                    begun.append(path)
                    if len(begun) == len(ids) - 1:
                        uploading.set()
                else:
                    cleaning.wait(0.5)
            return inner(environ, start_response)

        wsgi.app = gated
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        bucket = server.create_bucket()
        store = s3log.S3Store(bucket, endpoint_url=server.endpoint_url)
        log = s3log.Log(store)
        ids = _populate(log, 6)
        assert analytics.to_parquet(store, f"s3://{bucket}/export") == 6
        before = _s3_keys(server, bucket, "export/")
        server.client().put_object(Bucket=bucket, Key=log.layout.head(ids[-1]), Body=b"not a head")
        corrupt = log.layout.head(ids[-1])
        begun.clear()
        uploading.clear()
        cleaning.clear()
        with pytest.raises(s3log.CorruptionError):
            analytics.to_parquet(store, f"s3://{bucket}/export", mode="overwrite", sessions=ids, **FAILING_LATE)
        assert uploading.is_set()
        assert _s3_keys(server, bucket, "export/") == before
