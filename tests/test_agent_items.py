"""Agent sessions: malformed history items are refused before anything is buffered.

Before: ``user_input({1: "x"})`` (and every other item-taking verb) stored a mapping
with non-string keys, which came back from the state with an integer key (a model
client's JSON then says "1"), and tool-call items whose call id was not a string
(``7``, ``["a"]``) were matched by their text, so a restore's repair answered calls
the model never made. Items are message dicts (docs/agent.md): string keys, and the
fields the state reads (``role``, ``type``, ``call_id``, ``tool_call_id``,
``tool_calls[].id``) strings where present. Each test here failed before.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import s3log
from s3log.agent import AgentArgumentError, AgentItemError, AgentSession, AsyncAgentSession

BAD_ITEMS: list[tuple[Any, str]] = [
    ({1: "x"}, "string keys"),
    ({("a", "b"): 1, "role": "user"}, "string keys"),
    ({"role": 5, "content": "x"}, "['role']"),
    ({"type": b"function_call"}, "['type']"),
    ({"type": "function_call", "call_id": 7, "name": "f"}, "['call_id']"),
    ({"type": "function_call_output", "call_id": ["a"], "output": "x"}, "['call_id']"),
    ({"role": "tool", "tool_call_id": 3, "content": "x"}, "['tool_call_id']"),
    ({"role": "assistant", "tool_calls": "call_1"}, "['tool_calls'] must be a list"),
    ({"role": "assistant", "tool_calls": [5]}, "['tool_calls'][0]"),
    ({"role": "assistant", "tool_calls": [{1: "x"}]}, "['tool_calls'][0]"),
    ({"role": "assistant", "tool_calls": [{"id": 5, "type": "function"}]}, "['tool_calls'][0]['id']"),
]
VERBS = ["user_input", "assistant_items", "tool_results", "hook_items", "record_turn"]


def _name(verb: str) -> str:
    return "new_items" if verb == "record_turn" else "items"


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize(("bad", "says"), BAD_ITEMS)
def test_a_malformed_item_is_refused_naming_the_argument_before_anything_is_buffered(
    verb: str, bad: Any, says: str
) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    s = AgentSession.create(log)
    s.user_input("hello")
    s.turn_end()  # commits
    puts = store.requests["PUT"]
    for arg in (bad, [{"role": "user", "content": "fine"}, bad]):
        with pytest.raises(AgentArgumentError) as info:
            getattr(s, verb)(arg)
        err = info.value
        # Both what docs/agent.md promises for items and what any bad argument raises.
        assert isinstance(err, AgentItemError) and isinstance(err, s3log.InvalidEntryError)
        assert f"argument '{_name(verb)}'" in str(err) and says in str(err) and s.session_id in str(err)
        assert s.buffered == 0 and len(s.state.history) == 1
    assert store.requests["PUT"] == puts
    s.close()
    assert [h["content"] for h in AgentSession.restore(log, s.session_id).state.history] == ["hello"]


def test_the_other_item_taking_arguments_are_checked_too() -> None:
    log = s3log.Log(s3log.MemoryStore())
    with pytest.raises(AgentItemError, match="argument 'history'\\[0\\] must have string keys"):
        AgentSession.create(log, history=[{1: "x"}])
    s = AgentSession.create(log)
    with pytest.raises(AgentItemError, match="argument 'call_ids'\\[0\\] must be a string"):
        s.tool_started([7])
    assert s.buffered == 1  # the session start only
    s.close()


def test_message_dicts_as_model_clients_give_them_are_accepted() -> None:
    log = s3log.Log(s3log.MemoryStore())
    s = AgentSession.create(log)
    s.user_input({"role": "user", "content": [{"type": "input_text", "text": "hi"}]})
    # A Chat Completions message dumped by its client: absent fields are None.
    s.assistant_items({"role": "assistant", "content": "x", "tool_calls": None, "function_call": None})
    s.assistant_items({"role": "assistant", "content": None,
                       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
    s.assistant_items({"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"})
    assert set(s.state.open_calls) == {"c1", "c2"}
    s.tool_results([{"role": "tool", "tool_call_id": "c1", "content": "1"},
                    {"type": "function_call_output", "call_id": "c2", "output": "2"}])
    s.turn_end()
    s.close()
    assert len(AgentSession.restore(log, s.session_id).state.history) == 6


def test_async_sessions_refuse_them_alike() -> None:
    async def main() -> None:
        s = await AsyncAgentSession.create(s3log.AsyncLog(s3log.AsyncMemoryStore()))
        with pytest.raises(AgentItemError, match="string keys"):
            await s.user_input({1: "x"})
        with pytest.raises(AgentItemError, match="'call_id'"):
            await s.record_turn([{"role": "user", "content": "q"}, {"type": "function_call", "call_id": 7}])
        assert s.buffered == 1 and len(s.state.history) == 0
        await s.aclose()

    asyncio.run(main())
