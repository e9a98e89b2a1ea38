"""Lineage of a fork whose parent's id was taken over by another session."""

from __future__ import annotations

import json
from datetime import timedelta

from typer.testing import CliRunner

import s3log
from s3log.cli.app import app
from s3log.config import LogConfig
from s3log.env import Env
from tests.cli_env import log_of
from tests.delete_hooks import Clock
from tests.tombstones import tombstone_idle

T0 = 1_800_000_000_000
DAY = 86_400_000


def test_a_parent_id_taken_over_ends_the_lineage_instead_of_naming_the_new_session() -> None:
    # Lineage must not name, as the fork's parent, whatever session took the expired
    # parent's id over later.
    clock = Clock(T0)
    log = s3log.Log(s3log.MemoryStore(), config=LogConfig(env=Env.deterministic(3, clock)))
    parent = log.create("parent")
    parent.append("k", 1)
    parent.commit()
    child = log.open(log.fork("parent", child_id="child"))
    child.append("k", 2)
    child.commit()
    other = log.create("other")
    other.append("k", "other")
    other.commit()
    clock.t += 40 * DAY
    child.append("k", 3)
    child.commit()  # the child stays young
    other.append("k", "young")
    other.commit()
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["parent"]
    assert [s.expired for s in log.lineage("child")] == [False, True]  # an expired parent is still it
    # The id is taken over by a new session (a root chain over the tombstone).
    log.create("parent").append_durable("k", "new")
    steps = log.lineage("child")
    assert [s.session for s in steps] == ["child", "parent"]
    assert steps[1].replaced and steps[1].parent is None and not steps[0].replaced
    # The new session's own lineage is unaffected.
    assert [(s.session, s.replaced) for s in log.lineage("parent")] == [("parent", False)]


def test_a_parent_that_moved_on_is_still_the_parent() -> None:
    log = s3log.Log(s3log.MemoryStore())
    parent = log.create("p")
    for i in range(40):
        parent.append("k", {"i": i, "pad": "x" * 200})
        parent.commit()
    child = log.open(log.fork("p", child_id="c"))
    child.append_durable("k", "c")
    for i in range(200):
        parent.append("k", {"i": i, "pad": "y" * 200})  # the fork point leaves the tail
        parent.commit()
    steps = log.lineage("c")
    assert [(s.session, s.replaced) for s in steps] == [("c", False), ("p", False)]
    assert steps[0].parent is not None and steps[0].parent.seq == 39


def test_the_cli_roots_a_family_below_a_replaced_parent(env: dict[str, str]) -> None:
    clock = Clock(T0)
    log = log_of(env, LogConfig(env=Env.deterministic(3, clock)))
    log.create("parent").append_durable("k", 1)
    log.open(log.fork("parent", child_id="child")).append_durable("k", 2)
    clock.t += 40 * DAY
    log.open("child").append_durable("k", 3)
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["parent"]
    log.create("parent").append_durable("k", "new")
    log.close()
    result = CliRunner().invoke(app, ["lineage", "child", "--json"], env=env)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    # The family is drawn from the child: the session now at "parent" is not its root,
    # and the old fork marker under that id does not make it one.
    assert out["root"] == "child" and out["edges"] == []
    assert [(a["session"], a["replaced"], a["expired"]) for a in out["ancestors"]] == [
        ("child", False, False), ("parent", True, False)]
