"""Worker functions run in separate processes by the concurrency tests."""

from __future__ import annotations

import os
from typing import Any

import s3log


def serverless_turns(endpoint: str, bucket: str, session: str, worker: int, turns: int) -> list[dict[str, Any]]:
    """Each turn: restore the session, append two entries, commit, exit (like a Lambda).

    Returns one record per acknowledged entry: where it landed and under which head version.
    """
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    store = s3log.S3Store(bucket, endpoint_url=endpoint)
    log = s3log.Log(store)
    acked: list[dict[str, Any]] = []
    for turn in range(turns):
        w = log.open(session)
        w.append("user", {"w": worker, "turn": turn, "part": 0})
        w.append("assistant", {"w": worker, "turn": turn, "part": 1})
        result = w.commit()
        for e in result.acked:
            acked.append({"session": result.session_id, "version": result.ws.head.version,
                          "seq": e.seq, "data": e.data})
    log.close()
    return acked
