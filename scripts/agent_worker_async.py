"""An example asyncio agent worker: one invocation = restore, one turn, record, exit.

The asyncio twin of ``agent_worker.py`` (same fake model and tool), over
:class:`s3log.AsyncLog` and :class:`s3log.agent.AsyncAgentSession`::

    python scripts/agent_worker_async.py --bucket B --session SID --prompt "hello"

Tool calls of one model reply run concurrently; the session is drained by
``async with`` before the event loop ends (at interpreter exit there is no loop left
to commit on).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

from agent_worker import WAIT_FOR_BUSY_SECONDS, fake_model, run_tool

import s3log
from s3log._format.layout import DEFAULT_PREFIX
from s3log.agent import AsyncAgentSession


async def run_tool_async(call: dict[str, Any]) -> dict[str, Any]:
    """The tool, awaited (a real one would do network I/O here)."""
    await asyncio.sleep(0)
    return run_tool(call)


async def handle(log: s3log.AsyncLog, session_id: str | None, prompt: str, *,
                 follow_forks: bool = False, wait: float = WAIT_FOR_BUSY_SECONDS) -> dict[str, Any]:
    """One invocation. Returns the session the turn landed in (it may have forked).

    ``wait``: how long to wait for another invocation holding the session's turn;
    ``follow_forks``: continue the session's newest fork (docs/agent.md says when).
    """
    if session_id is None:
        session = await AsyncAgentSession.create(log, system_prompt="You are a helpful agent.",
                                                 config={"model": "fake-1"})
    else:
        session = await AsyncAgentSession.restore(log, session_id, follow_forks=follow_forks, wait=wait)
    async with session:
        await session.user_input(prompt)
        call = fake_model(session.state.history)
        await session.assistant_items(call)
        await session.tool_started(call["call_id"])
        await session.tool_results(await asyncio.gather(run_tool_async(call)))
        await session.assistant_items(fake_model(session.state.history))
        await session.outcome("finished")
        await session.turn_end()
    return {"session": session.session_id, "forked": bool(session.forks), "turns": session.state.turn_count,
            "prompt": prompt}


async def amain(bucket: str, prefix: str, session_id: str | None, prompt: str, follow_forks: bool,
                wait: float = WAIT_FOR_BUSY_SECONDS) -> dict[str, Any]:
    """Open the store, run one invocation, close the store."""
    store = s3log.AsyncS3Store(bucket)  # AWS_ENDPOINT_URL, if set, picks the endpoint
    try:
        return await handle(s3log.AsyncLog(store, prefix=prefix), session_id, prompt, follow_forks=follow_forks,
                            wait=wait)
    finally:
        await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bucket", default=os.environ.get("S3LOG_BUCKET"))
    parser.add_argument("--prefix", default=os.environ.get("S3LOG_PREFIX", DEFAULT_PREFIX))
    parser.add_argument("--session")
    parser.add_argument("--follow-forks", action="store_true", help="continue the session's newest fork")
    parser.add_argument("--prompt", default="hello")
    parser.add_argument("--wait", type=float, default=WAIT_FOR_BUSY_SECONDS,
                        help="seconds to wait for another invocation holding the session's turn")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(amain(args.bucket, args.prefix, args.session, args.prompt, args.follow_forks,
                                       args.wait))))


if __name__ == "__main__":
    main()
