"""The OpenAI Agents SDK session: protocol semantics, bounded reads, Runner.run, restore."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

import s3log
from s3log.integrations.openai_agents import S3LogSession
from s3log.protocol import LogConfig
from s3log.testing import LocalS3

set_tracing_disabled(True)


def _msg(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": text}


def test_session_protocol_semantics() -> None:
    log = s3log.Log(s3log.MemoryStore())
    s = S3LogSession("user/42 chat", log)  # any id works
    assert asyncio.run(s.get_items()) == []
    assert asyncio.run(s.pop_item()) is None
    asyncio.run(s.add_items([_msg("user", "a"), _msg("assistant", "b")]))
    asyncio.run(s.add_items([_msg("user", "c")]))
    assert [i["content"] for i in asyncio.run(s.get_items())] == ["a", "b", "c"]
    assert [i["content"] for i in asyncio.run(s.get_items(limit=2))] == ["b", "c"]
    assert asyncio.run(s.get_items(limit=0)) == []
    assert asyncio.run(s.pop_item())["content"] == "c"
    assert [i["content"] for i in asyncio.run(s.get_items())] == ["a", "b"]
    asyncio.run(s.clear_session())
    assert asyncio.run(s.get_items()) == []
    asyncio.run(s.add_items([_msg("user", "d")]))
    assert [i["content"] for i in asyncio.run(s.get_items())] == ["d"]
    kinds = [e.kind for e in log.read(s.sid).entries]
    assert kinds == ["oa.items", "oa.items", "oa.pop", "oa.clear", "oa.items"]  # nothing deleted
    log.verify(s.sid)


def test_bounded_get_items_does_not_replay_the_whole_log() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(tail_max_bytes=1))  # every commit writes a segment
    s = S3LogSession("long", log)
    for i in range(40):
        asyncio.run(s.add_items([_msg("user", f"m{i}")]))
    store.requests.reset()
    assert [i["content"] for i in asyncio.run(s.get_items(limit=3))] == ["m37", "m38", "m39"]
    segments = len(log.head(s.sid).segments)
    assert store.requests["GET"] < 1 + segments  # head + only the newest segments
    store.requests.reset()
    assert len(asyncio.run(s.get_items())) == 40


def test_concurrent_sessions_on_one_id_keep_every_item(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()

    async def main() -> None:
        sessions = [S3LogSession("shared", s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url)))
                    for _ in range(4)]
        await asyncio.gather(*(s.add_items([_msg("user", f"{n}-{i}")]) for n, s in enumerate(sessions)
                               for i in range(3)))
        items = await sessions[0].get_items()
        assert sorted(i["content"] for i in items) == sorted(f"{n}-{i}" for n in range(4) for i in range(3))

    asyncio.run(main())


def test_fork_and_fork_at() -> None:
    log = s3log.Log(s3log.MemoryStore())
    s = S3LogSession("base", log)
    asyncio.run(s.add_items([_msg("user", "a")]))
    asyncio.run(s.add_items([_msg("user", "b")]))
    f = s.fork()
    asyncio.run(f.add_items([_msg("user", "c")]))
    assert [i["content"] for i in asyncio.run(f.get_items())] == ["a", "b", "c"]
    assert [i["content"] for i in asyncio.run(f.get_items(limit=2))] == ["b", "c"]
    assert [i["content"] for i in asyncio.run(s.get_items())] == ["a", "b"]
    g = s.fork_at(at_seq=0, session_id="branch-1")
    assert [i["content"] for i in asyncio.run(g.get_items())] == ["a"]


class ScriptedModel(Model):
    """An offline model: replies by script, echoing how many items it was given."""

    def __init__(self) -> None:
        self.calls = 0

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, **kwargs: Any) -> ModelResponse:
        self.calls += 1
        n = len(input) if isinstance(input, list) else 1
        text = f"reply {self.calls} (saw {n} items)"
        msg = ResponseOutputMessage(id=f"msg_{self.calls}", type="message", role="assistant", status="completed",
                                    content=[ResponseOutputText(type="output_text", text=text, annotations=[])])
        return ModelResponse(output=[msg], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def test_runner_turns_then_restore_in_a_fresh_process(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    agent = Agent(name="helper", instructions="Be brief.", model=ScriptedModel())
    session = S3LogSession("conversation-1", log)
    outputs = []
    for prompt in ["hi", "how are you", "bye"]:
        result = asyncio.run(Runner.run(agent, prompt, session=session))
        outputs.append(result.final_output)
    assert outputs == ["reply 1 (saw 1 items)", "reply 2 (saw 3 items)", "reply 3 (saw 5 items)"]
    code = (
        "import asyncio, json, sys, s3log\n"
        "from s3log.integrations.openai_agents import S3LogSession\n"
        f"log = s3log.Log(s3log.S3Store({bucket!r}, endpoint_url={s3log_server.endpoint_url!r}))\n"
        "items = asyncio.run(S3LogSession('conversation-1', log).get_items())\n"
        "print(json.dumps(items))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **s3log_server.env()},
                         capture_output=True, text=True, timeout=120, check=True)
    items = json.loads(out.stdout)
    texts = [i["content"] if isinstance(i["content"], str) else i["content"][0]["text"] for i in items]
    assert texts == ["hi", "reply 1 (saw 1 items)", "how are you", "reply 2 (saw 3 items)", "bye",
                     "reply 3 (saw 5 items)"]
