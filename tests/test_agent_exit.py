"""A process that exits without closing its agent sessions: flushed if possible, else a warning."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import s3log
from s3log.agent import AgentSession
from s3log.testing.plugin import LocalS3
from tests.test_agent import later

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRELUDE = """
import sys
import s3log
import s3log.agent
from s3log.agent import AgentSession, AsyncAgentSession
endpoint, bucket = sys.argv[1], sys.argv[2]
quick = s3log.LogConfig(retry=s3log.RetryPolicy(attempts=1, initial=0.0001, max_backoff=0.0002))
"""


def _run(script: str, endpoint: str, bucket: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": ROOT}  # this checkout's s3log, not an installed one
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script), endpoint, bucket],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )


@pytest.mark.parametrize("ending", ["", "raise RuntimeError('the handler crashed')"])
def test_exit_without_close_commits_the_buffer(s3log_server: LocalS3, ending: str) -> None:
    bucket = s3log_server.create_bucket()
    out = _run(f"""
        log = s3log.Log(s3log.S3Store(bucket, endpoint_url=endpoint))

        def handler() -> str:  # the session is dropped when it returns, still buffering
            s = AgentSession.create(log, system_prompt="sys", max_buffer_bytes=10**9)
            s.user_input("left in the buffer")
            # Too big for the head to keep inline (decision 0033): this commit writes a segment
            # through the log's thread pool, which must still take work when the exit hook runs.
            s.assistant_items([{{"role": "assistant", "content": "x" * 140000}}])
            return s.session_id

        print(handler(), flush=True)
        {ending}
    """, s3log_server.endpoint_url, bucket)
    assert (out.returncode != 0) == bool(ending), out.stderr
    assert "RecordsLostWarning" not in out.stderr, out.stderr
    sid = out.stdout.strip()
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    assert [e.kind for e in log.read(sid).entries] == [
        "agent.session_start", "agent.user_input", "agent.assistant_items"]
    # The segment went out (beside the head, through the pool) and is stored.
    head = log.head(sid)
    assert head.pending is not None and not head.segments
    s3log_server.client().head_object(Bucket=bucket, Key=head.pending.key)
    # The open turn is repaired later: once the dead worker's lease has expired.
    assert AgentSession.restore(later(log), sid).state.last_run_interrupted
    log.close()


def test_exit_with_the_store_unreachable_warns_naming_session_and_count() -> None:
    out = _run("""
        log = s3log.Log(s3log.S3Store(bucket, endpoint_url=endpoint), config=quick)
        s = AgentSession.create(log)
        s.user_input("cannot be saved")
        idle = AgentSession.create(log)  # holds only its start: nothing to lose, nothing said
        print(s.session_id, idle.session_id, flush=True)
    """, "http://127.0.0.1:9", "nowhere")
    assert out.returncode == 0, out.stderr
    sid, idle = out.stdout.split()
    assert "RecordsLostWarning" in out.stderr
    assert f"session {sid}: 2 buffered record(s) lost at exit" in out.stderr
    assert idle not in out.stderr


def test_an_asyncio_session_left_open_at_exit_is_reported() -> None:
    out = _run("""
        import asyncio

        async def main() -> str:
            log = s3log.AsyncLog(s3log.AsyncMemoryStore())
            s = await AsyncAgentSession.create(log)
            await s.user_input("never closed")
            await s.assistant_items({"role": "assistant", "content": "..."})
            return s.session_id

        print(asyncio.run(main()), flush=True)
    """, "", "")
    assert out.returncode == 0, out.stderr
    sid = out.stdout.strip()
    # The start and the user input were committed when the turn opened: only the reply is lost.
    assert f"session {sid}: 1 buffered record(s) lost at exit" in out.stderr
    assert "await session.aclose()" in out.stderr


def test_a_closed_session_says_nothing_at_exit(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    out = _run("""
        log = s3log.Log(s3log.S3Store(bucket, endpoint_url=endpoint))
        with AgentSession.create(log) as s:
            s.user_input("saved")
        print(s.session_id, flush=True)
        s3log.agent.close(log)
    """, s3log_server.endpoint_url, bucket)
    assert out.returncode == 0 and out.stderr == "", out.stderr
