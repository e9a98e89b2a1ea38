"""Agent session options and arguments are checked before anything is queued, restored or written.
"""

from __future__ import annotations

from typing import Any

import pytest

import s3log
import s3log.agent
import s3log.errors
from s3log.agent import (
    AgentArgumentError,
    AgentSession,
    AsyncAgentSession,
)
from tests.helpers import kinds
from tests.test_agent import later


def test_an_unknown_option_is_refused_before_a_restore_repairs(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log)
    s.user_input("crashed mid-turn")
    s.flush()
    version = log.head(s.session_id).version
    with pytest.raises(s3log.agent.AgentArgumentError, match="max_buffer_entrys"):
        AgentSession.restore(later(log), s.session_id, max_buffer_entrys=3)  # past the lease: would repair
    assert log.head(s.session_id).version == version


BAD_OPTIONS = [
    {"max_delay": None}, {"max_delay": float("nan")}, {"max_delay": -1}, {"max_delay": True},
    {"max_buffer_entries": "64"}, {"max_buffer_entries": -1}, {"max_buffer_entries": True},
    {"max_buffer_bytes": None}, {"max_buffer_bytes": 1.5},
    {"on_fork": "not callable"},
    {"lease_ttl": 0.0004}, {"lease_ttl": float("inf")}, {"lease_ttl": float("nan")}, {"lease_ttl": 1e17},
]


@pytest.mark.parametrize("option", BAD_OPTIONS)
def test_a_bad_option_is_refused_before_anything_is_queued_or_written(option: dict[str, Any]) -> None:
    log = s3log.Log(s3log.MemoryStore())
    with pytest.raises(AgentArgumentError):
        AgentSession.create(log, **option)
    busy = AgentSession.create(log, owner="a")
    busy.user_input("hi")
    before = log.head(busy.session_id).version
    with pytest.raises(AgentArgumentError):
        AgentSession.restore(log, busy.session_id, force=True, **option)  # would repair
    with pytest.raises(AgentArgumentError):
        busy.fork(**option)
    with pytest.raises(AgentArgumentError):
        AgentSession.fork_at(log, busy.session_id, at_seq=0, **option)
    assert log.head(busy.session_id).version == before
    assert log.list_session_ids() == [busy.session_id]


@pytest.mark.parametrize("option", [{"max_delay": None}, {"on_fork": 1}, {"lease_ttl": float("inf")}])
async def test_async_bad_option_is_refused(option: dict[str, Any]) -> None:
    log = s3log.AsyncLog(s3log.AsyncMemoryStore())
    with pytest.raises(AgentArgumentError):
        await AsyncAgentSession.create(log, **option)


def test_good_edge_options_are_accepted() -> None:
    log = s3log.Log(s3log.MemoryStore())
    s = AgentSession.create(log, max_delay=float("inf"), max_buffer_entries=1, max_buffer_bytes=0,
                            lease_ttl=0.001, on_fork=lambda session, info: None)
    s.user_input("hi")
    s.turn_end()
    assert kinds(log, s.session_id)[-1] == "agent.turn_end"


@pytest.mark.parametrize("wait", [float("nan"), float("inf"), -1, "1", True])
def test_restore_refuses_a_bad_wait(wait: Any) -> None:
    log = s3log.Log(s3log.MemoryStore())
    busy = AgentSession.create(log, owner="x")
    busy.user_input("q")
    with pytest.raises(AgentArgumentError):
        AgentSession.restore(log, busy.session_id, wait=wait)


@pytest.mark.parametrize("bad", ["3", None, 3.9, -4, True])
def test_cache_locked_refuses_a_bad_prefix_len(bad: Any) -> None:
    log = s3log.Log(s3log.MemoryStore())
    s = AgentSession.create(log)
    s.user_input("x")
    with pytest.raises(s3log.InvalidEntryError, match="prefix_len"):
        s.cache_locked(bad)
    assert s.buffered == 0
    s.cache_locked(1)
    assert s.state.locked_prefix_len == 1


@pytest.mark.parametrize(("kw", "error"), [
    ({"config": 5}, s3log.InvalidEntryError),
    ({"meta": {"labels": 5}}, AgentArgumentError),
    ({"meta": 5}, AgentArgumentError),
    ({"labels": 5}, AgentArgumentError),
    ({"delegation_depth": "x"}, AgentArgumentError),
    ({"delegation_depth": -1}, AgentArgumentError),
    ({"parent_session": 5}, AgentArgumentError),
])
def test_create_refuses_a_malformed_config_or_header(kw: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        AgentSession.create(s3log.Log(s3log.MemoryStore()), **kw)
