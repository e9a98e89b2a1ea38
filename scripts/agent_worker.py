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
from collections.abc import Mapping, Sequence
from typing import Any

import s3log
from s3log._format.layout import DEFAULT_PREFIX
from s3log.agent import AgentSession


def fake_model(history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Deterministic stand-in for an LLM call: a tool call, then a final answer."""
    last: Mapping[str, Any] = history[-1] if history else {}
    digest = hashlib.sha256(json.dumps(history, sort_keys=True, default=str).encode()).hexdigest()[:10]
    if last.get("role") == "user":
        return {"type": "function_call", "call_id": f"call_{digest}", "name": "lookup",
                "arguments": json.dumps({"q": last.get("content")})}
    return {"role": "assistant", "content": f"answer {digest}"}


def run_tool(call: dict[str, Any]) -> dict[str, Any]:
    """The tool: deterministic, side-effect free."""
    return {"type": "function_call_output", "call_id": call["call_id"], "output": f"looked up {call['arguments']}"}


def handle(
    log: s3log.Log,
    session_id: str | None,
    prompt: str,
    *,
    wait: float | None = None,
    lease_ttl: float | None = None,
) -> dict[str, Any]:
    """One invocation. Returns the session the turn landed in (it may have forked).

    ``wait``: how long to wait for another invocation holding the session's turn
    (default :data:`WAIT_FOR_BUSY_SECONDS`). ``lease_ttl``: how long this invocation's
    turn is leased past each commit (default :data:`LEASE_TTL_SECONDS`).
    """
    ttl = LEASE_TTL_SECONDS if lease_ttl is None else lease_ttl
    if session_id is None:
        session = AgentSession.create(log, system_prompt="You are a helpful agent.", config={"model": "fake-1"},
                                      lease_ttl=ttl)
    else:
        # A second invocation for the same conversation (a double-clicked Send, a Lambda
        # retry) waits for the first to finish its turn, then continues the same session.
        session = AgentSession.restore(log, session_id, wait=WAIT_FOR_BUSY_SECONDS if wait is None else wait,
                                       lease_ttl=ttl)
    with session:  # an exception inside gives the turn up: its lease is released, a retry repairs it
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
#: How long a turn stays leased past each commit, outside Lambda (seconds).
LEASE_TTL_SECONDS = 300.0
_LOG: s3log.Log | None = None


def lease_ttl_for(context: Any) -> float:
    """A turn's lease for one Lambda invocation: until the invocation's own timeout
    (a killed invocation cannot hold the session longer than it could have run), plus
    a margin for clock skew. Outside Lambda (no context): :data:`LEASE_TTL_SECONDS`."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return LEASE_TTL_SECONDS
    return max(1.0, float(remaining()) / 1000) + 5.0


def _container_log() -> s3log.Log:
    """One Log (and boto3 client) per Lambda container, built on the first invocation:
    a client costs hundreds of milliseconds to build, and warm invocations reuse it."""
    global _LOG
    if _LOG is None:
        prefix = os.environ.get("S3LOG_PREFIX", DEFAULT_PREFIX)
        _LOG = s3log.Log(s3log.S3Store(os.environ["S3LOG_BUCKET"]), prefix=prefix)
    return _LOG


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """AWS Lambda entry point: ``{"session": SID or null, "prompt": "..."}``."""
    return handle(_container_log(), event.get("session"), str(event.get("prompt", "")),
                  lease_ttl=lease_ttl_for(context))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bucket", default=os.environ.get("S3LOG_BUCKET"))
    parser.add_argument("--prefix", default=os.environ.get("S3LOG_PREFIX", DEFAULT_PREFIX))
    parser.add_argument("--session")
    parser.add_argument("--prompt", default="hello")
    parser.add_argument("--wait", type=float, default=WAIT_FOR_BUSY_SECONDS,
                        help="seconds to wait for another invocation holding the session's turn")
    args = parser.parse_args()
    log = s3log.Log(s3log.S3Store(args.bucket), prefix=args.prefix)
    print(json.dumps(handle(log, args.session, args.prompt, wait=args.wait)))
    log.close()


if __name__ == "__main__":
    main()
