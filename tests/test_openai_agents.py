"""The OpenAI Agents SDK session: protocol semantics, bounded reads, Runner.run, restore."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.memory import SessionABC
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

import s3log
from s3log.config import LogConfig
from s3log.integrations import IntegrationError
from s3log.integrations.openai_agents import S3LogSession
from s3log.testing.plugin import LocalS3

set_tracing_disabled(True)


def _msg(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": text}


@pytest.mark.parametrize("kind", ["Log", "AsyncLog"])
def test_session_protocol_semantics(kind: str) -> None:
    async def main() -> None:
        log = s3log.Log(s3log.MemoryStore()) if kind == "Log" else s3log.AsyncLog(s3log.AsyncMemoryStore())
        s = S3LogSession("user/42 chat", log)  # any id works
        assert isinstance(s, SessionABC)
        assert await s.get_items() == []
        assert await s.pop_item() is None
        await s.add_items([_msg("user", "a"), _msg("assistant", "b")])
        await s.add_items([_msg("user", "c")])
        assert [i["content"] for i in await s.get_items()] == ["a", "b", "c"]
        assert [i["content"] for i in await s.get_items(limit=2)] == ["b", "c"]
        assert await s.get_items(limit=0) == []
        assert (await s.pop_item())["content"] == "c"
        assert [i["content"] for i in await s.get_items()] == ["a", "b"]
        await s.clear_session()
        assert await s.get_items() == []
        await s.add_items([_msg("user", "d")])
        assert [i["content"] for i in await s.get_items()] == ["d"]
        if isinstance(log, s3log.AsyncLog):
            entries = (await log.read(s.sid)).entries
            await log.verify(s.sid)
        else:
            entries = log.read(s.sid).entries
            log.verify(s.sid)
        kinds = [e.kind for e in entries]
        assert kinds == ["oa.items", "oa.items", "oa.pop", "oa.clear", "oa.items"]  # nothing deleted

    asyncio.run(main())


def test_bounded_get_items_does_not_replay_the_whole_log() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(tail_per_commit=0, tail_max_bytes=1))  # every commit writes a segment
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


def test_refuses_what_is_not_a_log() -> None:
    with pytest.raises(IntegrationError, match="S3LogSession"):
        S3LogSession("x", s3log.MemoryStore())  # type: ignore[arg-type]


def test_over_an_async_log_no_worker_threads_and_concurrent_writers(s3log_server: LocalS3,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = s3log_server.create_bucket()

    def no_threads(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an AsyncLog session ran something in a thread")

    async def main() -> None:
        stores = [s3log.AsyncS3Store(bucket, endpoint_url=s3log_server.endpoint_url) for _ in range(4)]
        sessions = [S3LogSession("shared", s3log.AsyncLog(st)) for st in stores]
        try:
            monkeypatch.setattr(asyncio, "to_thread", no_threads)
            monkeypatch.setattr(asyncio.get_running_loop(), "run_in_executor", no_threads)
            # Four writers on one session: commits meet each other's and retry.
            await asyncio.gather(*(s.add_items([_msg("user", f"{n}-{i}")]) for n, s in enumerate(sessions)
                                   for i in range(3)))
            items = await sessions[0].get_items()
            assert sorted(i["content"] for i in items) == sorted(f"{n}-{i}" for n in range(4) for i in range(3))
            assert all(st.requests["PUT"] > 0 for st in stores)
            popped = await asyncio.gather(*(s.pop_item() for s in sessions))
            assert len({p["content"] for p in popped}) == 4  # each pop removed a different item
            assert len(await sessions[1].get_items()) == 8
            branch = await sessions[0].afork_at(at_seq=0, session_id="branch")
            assert len(await branch.get_items()) == 1
            with pytest.raises(IntegrationError, match="afork_at"):
                sessions[0].fork()
        finally:
            monkeypatch.undo()
            for st in stores:
                await st.aclose()

    asyncio.run(main())


def test_from_url_runner_turns_then_a_new_session_reads_them(s3log_server: LocalS3,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = s3log_server.create_bucket()
    url = f"s3://{bucket}/agents?endpoint={s3log_server.endpoint_url}"

    async def main() -> None:
        agent = Agent(name="helper", instructions="Be brief.", model=ScriptedModel())
        session = S3LogSession.from_url("conversation-1", url=url)
        assert isinstance(session.log, s3log.AsyncLog)
        try:
            for prompt in ["hi", "bye"]:
                await Runner.run(agent, prompt, session=session)
            fork = await session.afork(session_id="conversation-1-branch")
            await fork.add_items([_msg("user", "only in the branch")])
        finally:
            await session.aclose()
        assert session.log.store._client is None  # type: ignore[attr-defined]  # closed
        # The endpoint from the environment instead of the URL.
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3log_server.endpoint_url)
        again = S3LogSession.from_url("conversation-1", url=f"s3://{bucket}/agents")
        try:
            items = await again.get_items()
            branch = await S3LogSession("conversation-1-branch", again.log).get_items()
        finally:
            await again.aclose()
        assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]
        assert items[0]["content"] == "hi" and len(branch) == 5

    asyncio.run(main())
