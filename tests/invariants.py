"""Checks shared by the concurrency, fault and property tests."""

from __future__ import annotations

from collections import Counter
from typing import Any

import s3log
from s3log._format.values import FORK_KIND


def key_of(data: Any) -> Any:
    """A hashable identity of an entry's data."""
    if isinstance(data, dict):
        return tuple(sorted((k, key_of(v)) for k, v in data.items()))
    if isinstance(data, list):
        return tuple(key_of(v) for v in data)
    return data


def check_no_loss_no_duplicates(log: s3log.Log, acked: list[Any]) -> dict[str, list[s3log.Entry]]:
    """Every session verifies; every acknowledged entry is stored exactly once, counting
    chain entries (not fork seeds) across all sessions; nothing unacknowledged is stored
    twice. Returns the entries of every session."""
    sessions: dict[str, list[s3log.Entry]] = {}
    for sid in log.list_session_ids():
        log.verify(sid)
        sessions[sid] = log.read(sid).entries
    stored = Counter(key_of(e.data) for es in sessions.values() for e in es if e.kind != FORK_KIND)
    for data in acked:
        assert stored[key_of(data)] == 1, f"acknowledged entry {data!r} stored {stored[key_of(data)]} times"
    dupes = [k for k, n in stored.items() if n > 1]
    assert not dupes, f"entries stored twice: {dupes[:5]}"
    return sessions
