"""What agent sessions take (user input, assistant items, tool ids) and give (read-only state views).
"""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest

import s3log
import s3log.agent
from s3log import InvalidEntryError
from s3log.agent import (
    AgentSession,
    thaw,
)


def test_state_views_are_read_only_and_nothing_leaks(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log, config={"model": "m"})
    msg = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    s.user_input([msg])
    msg["content"][0]["text"] = "changed by the caller"  # type: ignore[index]
    s.assistant_items([{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f"}}]}])
    st = s.state
    with pytest.raises(TypeError, match="read-only"):
        st.history[0]["content"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError, match="read-only"):
        st.history[0]["content"][0]["text"] = "x"
    with pytest.raises(TypeError, match="read-only"):
        st.history.append({"role": "user"})  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="read-only"):
        st.history[1]["tool_calls"][0]["id"] = "c2"
    with pytest.raises(TypeError, match="read-only"):
        st.config["model"] = "n"  # type: ignore[index]
    with pytest.raises(TypeError, match="read-only"):
        s.meta["labels"] = {"cwd": "/x"}  # type: ignore[index]
    with pytest.raises(TypeError, match="read-only"):
        st.open_calls.clear()  # type: ignore[attr-defined]
    # They still serialize like plain data, and a copy is mutable.
    assert json.loads(json.dumps(st.history))[0]["content"][0]["text"] == "hi"
    mine = copy.deepcopy(st.history)
    mine[0]["content"] = "mutable"
    assert thaw(st.history)[0] == {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert pickle.loads(pickle.dumps(st.history))[0]["content"][0]["text"] == "hi"
    s.turn_end()
    stored = AgentSession.restore(log, s.session_id).state
    assert stored.history[0]["content"][0]["text"] == "hi"
    assert stored.history == s.state.history and stored.open_calls == {}
    assert log.head(s.session_id).meta["labels"] == {}


def test_user_input_takes_a_string_a_message_or_a_list(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log)
    s.user_input({"role": "user", "content": "one dict"})
    s.user_input("a string")
    s.user_input([{"role": "user", "content": "a list"}])
    s.tool_results({"type": "function_call_output", "call_id": "c", "output": "one result"})
    s.turn_end()
    history = AgentSession.restore(log, s.session_id).state.history
    assert [h.get("content") or h.get("output") for h in history] == ["one dict", "a string", "a list", "one result"]


@pytest.mark.parametrize("bad", [42, None, b"bytes", [1], ["text"], [{"role": "user"}, 3]])
def test_user_input_of_another_shape_is_refused_naming_the_argument(s3log_log: s3log.Log, bad: Any) -> None:
    s = AgentSession.create(s3log_log)
    with pytest.raises(InvalidEntryError, match="argument 'items'") as info:
        s.user_input(bad)
    assert isinstance(info.value, ValueError) and s.session_id in str(info.value)
    assert s.buffered == 1 and len(s.state.history) == 0  # only the session start


def test_assistant_items_refuse_a_bare_string(s3log_log: s3log.Log) -> None:
    s = AgentSession.create(s3log_log)
    with pytest.raises(InvalidEntryError, match="argument 'items' must be a message dict or a list of them"):
        s.assistant_items("just text")  # type: ignore[arg-type]


def test_tool_started_takes_one_id(s3log_log: s3log.Log) -> None:
    s = AgentSession.create(s3log_log)
    s.assistant_items({"type": "function_call", "call_id": "call-1", "name": "f", "arguments": "{}"})
    s.tool_started("call-1")
    assert s.state.started_calls == frozenset({"call-1"})


@pytest.mark.parametrize("log", ["my-bucket", None, s3log.MemoryStore(), s3log.AsyncLog(s3log.AsyncMemoryStore())],
                         ids=["bucket-name", "none", "store", "async-log"])
def test_an_agent_session_on_something_other_than_a_log_names_log(log: Any) -> None:
    """Each verb that takes a log refuses anything but an s3log.Log, naming ``log``."""
    for verb in (lambda: AgentSession.create(log), lambda: AgentSession.restore(log, "s1"),
                 lambda: AgentSession.fork_at(log, "s1"), lambda: AgentSession.list(log)):
        with pytest.raises(s3log.agent.AgentArgumentError, match=r"argument 'log' must be an s3log\.Log"):
            verb()


def test_an_async_agent_session_on_a_blocking_log_names_log() -> None:
    """The async session takes an s3log.AsyncLog only."""
    import asyncio

    from s3log.agent import AsyncAgentSession

    with pytest.raises(s3log.agent.AgentArgumentError, match=r"argument 'log' must be an s3log\.AsyncLog"):
        asyncio.run(AsyncAgentSession.create(s3log.Log(s3log.MemoryStore())))  # type: ignore[arg-type]


class _CountingStore(s3log.MemoryStore):
    """A MemoryStore that records the keys it is asked to write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def put_if_absent(self, key: str, body: bytes) -> str:
        self.writes.append(key)
        return super().put_if_absent(key, body)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.writes.append(key)
        return super().put_if_match(key, body, etag)


@pytest.mark.parametrize(("record", "named"), [
    (lambda s: s.outcome("finished", message={"not": "text"}), "message"),
    (lambda s: s.outcome("finished", interrupted="yes"), "interrupted"),
    (lambda s: s.record_turn([{"role": "assistant", "content": "x"}], outcome="finished", message=3), "message"),
    (lambda s: s.tool_started(""), "call_ids"),
    (lambda s: s.tool_started(["c1", ""]), "call_ids"),
], ids=["outcome-message", "outcome-interrupted", "record_turn-message", "tool_started-empty",
        "tool_started-one-empty"])
def test_records_of_the_wrong_type_are_refused_before_they_are_stored(record: Any, named: str) -> None:
    """An outcome's message is text, ``interrupted`` a bool, a call id non-empty: anything
    else is an InvalidEntryError naming the argument, and nothing is written."""
    store = _CountingStore()
    s = AgentSession.create(s3log.Log(store), session_id="a1")
    s.user_input("hi")
    s.flush()
    store.writes.clear()
    with pytest.raises(InvalidEntryError, match=named):
        record(s)
    s.flush()
    assert store.writes == []


@pytest.mark.parametrize("prompt", [{"role": "system"}, 5, b"text"])
def test_a_system_prompt_that_is_not_text_is_refused(prompt: Any) -> None:
    """``system_prompt`` is text or None; anything else is refused, naming it, and nothing is stored."""
    store = s3log.MemoryStore()
    with pytest.raises(InvalidEntryError, match="system_prompt"):
        AgentSession.create(s3log.Log(store), system_prompt=prompt)
    assert store.list("").objects == []
