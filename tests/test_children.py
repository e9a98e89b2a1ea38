"""``Log.children`` and ``s3log lineage``: a session's children are the forks of that session alone,
whatever stray objects or reused ids lie under its forks folder.
"""

from __future__ import annotations

import logging

import pytest

import s3log
from s3log.testing.plugin import LocalS3
from tests.cli_env import invoke, log_of, no_python_error
from tests.helpers import parent_and_fork, sessions_log


def test_children_skip_a_stray_object_under_forks(caplog: pytest.LogCaptureFixture) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    parent, child = parent_and_fork(log)
    for stray in ("notes..txt", "bad id", "..", "a/b"):
        store.put_raw(f"s3log/sessions/{parent}/forks/{stray}", b"hello")
    with caplog.at_level(logging.WARNING, logger="s3log"):
        assert log.children(parent) == [child]
    assert "notes..txt" in caplog.text and "not a valid session id" in caplog.text
    assert [s.session for s in log.lineage(child)] == [child, parent]


def test_lineage_command_with_a_stray_object_under_forks(env: dict[str, str], s3log_server: LocalS3) -> None:
    log = log_of(env)
    parent, child = parent_and_fork(log)
    s3log_server.client().put_object(Bucket=env["S3LOG_BUCKET"], Key=f"s3log/sessions/{parent}/forks/notes..txt",
                                     Body=b"x")
    result = invoke(env, "lineage", child)
    no_python_error(result)
    assert result.exit_code == 0 and child in result.stdout and parent in result.stdout
    assert "notes..txt" not in result.stdout


def test_a_deleted_childs_id_used_again_by_a_root_session_is_not_the_old_parents_child() -> None:
    log = sessions_log(s3log.MemoryStore(), "p1")
    log.fork("p1", child_id="c1")
    assert log.children("p1") == ["c1"]
    log.delete("c1")  # its young marker under p1 is left to gc
    w = log.create("c1")  # the id used again: a root session
    w.append("k", "new")
    w.commit()
    assert log.children("p1") == []
    report = log.gc(older_than_ms=0)  # gc keeps the marker (its child has a head) ...
    assert report.deleted == []
    assert log.children("p1") == []  # ... and it still names no child of p1
    assert log.lineage("c1")[-1].session == "c1"


def test_a_deleted_childs_id_forked_into_from_another_parent_is_that_parents_child_alone() -> None:
    log = sessions_log(s3log.MemoryStore(), "p1", "p2")
    log.fork("p1", child_id="c1")
    log.delete("c1")
    assert log.fork("p2", child_id="c1") == "c1"
    assert log.children("p2") == ["c1"]
    assert log.children("p1") == []
    assert [s.session for s in log.lineage("c1")] == ["c1", "p2"]


def test_child_heads_give_each_fork_with_its_head_read_once() -> None:
    """``Log.child_heads``: the children of ``children``, each with its head (one LIST of the
    markers, one GET per fork, as ``children``), so a caller choosing among forks reads no head again."""
    store = s3log.MemoryStore()
    log = sessions_log(store, "p1")
    log.fork("p1", child_id="c1")
    log.fork("p1", child_id="c2")
    store.requests.reset()
    rows = log.child_heads("p1")
    spent = store.requests.snapshot()
    store.requests.reset()
    assert sorted(r.session for r in rows) == sorted(log.children("p1")) == ["c1", "c2"]
    assert store.requests.snapshot() == spent and spent["GET"] == 2  # as children: a GET per fork
    assert all(r.head is not None and r.head.parent is not None and r.head.parent.session == "p1" for r in rows)


async def test_child_heads_on_an_async_log_are_the_same_rows() -> None:
    store = s3log.MemoryStore()
    log = sessions_log(store, "p1")
    log.fork("p1", child_id="c1")
    alog = s3log.AsyncLog(s3log.AsyncMemoryStore(store))
    assert [r.session for r in await alog.child_heads("p1")] == ["c1"]
    assert await alog.child_heads("p1") == log.child_heads("p1")
