"""An example serverless agent worker: one invocation = restore, one turn, record, exit.

Run as a Lambda handler (``handler(event, context)``) or from the shell::

    python scripts/agent_worker.py --bucket B --session SID --prompt "hello"

The model is a deterministic fake (no network): it asks for one tool call on the first
pass and answers once it sees the result, like a real tool-using model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from typing import Any

import s3log
from s3log.agent import AgentSession


def fake_model(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Deterministic stand-in for an LLM call: a tool call, then a final answer."""
    last = history[-1] if history else {}
    digest = hashlib.sha256(json.dumps(history, sort_keys=True, default=str).encode()).hexdigest()[:10]
    if last.get("role") == "user":
        return {"type": "function_call", "call_id": f"call_{digest}", "name": "lookup",
                "arguments": json.dumps({"q": last.get("content")})}
    return {"role": "assistant", "content": f"answer {digest}"}


def run_tool(call: dict[str, Any]) -> dict[str, Any]:
    """The tool: deterministic, side-effect free."""
    return {"type": "function_call_output", "call_id": call["call_id"], "output": f"looked up {call['arguments']}"}


def handle(log: s3log.Log, session_id: str | None, prompt: str) -> dict[str, Any]:
    """One invocation. Returns the session the turn landed in (it may have forked)."""
    if session_id is None:
        session = AgentSession.create(log, system_prompt="You are a helpful agent.", config={"model": "fake-1"})
    else:
        # A second invocation for the same conversation (a double-clicked Send, a Lambda
        # retry) waits for the first to finish its turn, then continues the same session.
        session = AgentSession.restore(log, session_id, wait=WAIT_FOR_BUSY_SECONDS)
    with session:
        session.user_input(prompt)
        call = fake_model(session.state.history)
        session.assistant_items([call])
        session.tool_started([call["call_id"]])
        session.tool_results([run_tool(call)])
        session.assistant_items([fake_model(session.state.history)])
        session.outcome("finished")
        session.turn_end()
    return {"session": session.session_id, "forked": bool(session.forks), "turns": session.state.turn_count,
            "prompt": prompt}


#: How long an invocation waits for another one holding the same session's turn.
WAIT_FOR_BUSY_SECONDS = 30.0
_LOG: s3log.Log | None = None


def _container_log() -> s3log.Log:
    """One Log (and boto3 client) per Lambda container, built on the first invocation:
    a client costs hundreds of milliseconds to build, and warm invocations reuse it."""
    global _LOG
    if _LOG is None:
        _LOG = s3log.Log(s3log.S3Store(os.environ["S3LOG_BUCKET"]), prefix=os.environ.get("S3LOG_PREFIX", "s3log"))
    return _LOG


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """AWS Lambda entry point: ``{"session": SID or null, "prompt": "..."}``."""
    return handle(_container_log(), event.get("session"), str(event.get("prompt", "")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bucket", default=os.environ.get("S3LOG_BUCKET"))
    parser.add_argument("--prefix", default=os.environ.get("S3LOG_PREFIX", "s3log"))
    parser.add_argument("--session")
    parser.add_argument("--prompt", default="hello")
    args = parser.parse_args()
    log = s3log.Log(s3log.S3Store(args.bucket), prefix=args.prefix)
    print(json.dumps(handle(log, args.session, args.prompt)))
    log.close()


if __name__ == "__main__":
    main()
