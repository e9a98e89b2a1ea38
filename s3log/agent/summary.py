"""Summaries that keep history: the span a summary names, checked against the chain.

A summary (``agent.summary``) is an appended entry, not a rewrite: it names the exact
span of the session's own chain it stands for (first and last entry, by seq and hash)
and carries the whole state after it, so a restore reads back only to the newest one
(:meth:`s3log.agent.AgentReducer.restarts`) while every entry it stands for stays in
the chain, readable, verifiable and forkable. Here: the argument checks of a span and
the procedure that checks it against what is stored, before anything is written.
Its own room: the shells' core (:mod:`s3log.agent.core`) only calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from s3log._format.values import Entry
from s3log._upper import Proc, call
from s3log.agent.errors import SummarySpanError
from s3log.agent.state import SessionState, SummarySpan
from s3log.aio import AsyncLog
from s3log.log import Log


def _seq_arg(session: str, name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise SummarySpanError(session, None, f"{name} must be an integer seq, not {value!r}")
    if value < 0:
        raise SummarySpanError(session, value, f"{name} must be >= 0")
    return value


def _hash_arg(session: str, name: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)) and len(value) == 32:
        return bytes(value).hex()
    if isinstance(value, str) and len(value) == 64:
        try:
            return bytes.fromhex(value).hex()
        except ValueError:
            pass
    raise SummarySpanError(session, None, f"{name} must be an entry hash (32 bytes or 64 hex digits), not {value!r}")


def span_proc(
    log: Log | AsyncLog, session: str, state: SessionState, last_committed: int,
    first_seq: Any, first_hash: Any, last_seq: Any, last_hash: Any,
) -> Proc[SummarySpan]:
    """The span a summary of ``session`` (committed up to ``last_committed``) stands for,
    checked against the stored chain: ``first_seq..last_seq`` inside it, in order, and
    each hash given the entry's at its seq. Defaults: from the newest summary's own entry
    (or seq 0) to the last committed entry. One read back to ``first_seq``
    (``log.read_suffix``); raises :class:`SummarySpanError` naming the session and seq."""
    first = _seq_arg(session, "first_seq", first_seq)
    last = _seq_arg(session, "last_seq", last_seq)
    want_first = _hash_arg(session, "first_hash", first_hash)
    want_last = _hash_arg(session, "last_hash", last_hash)
    if last_committed < 0:
        raise SummarySpanError(session, None, "the session has no committed entry to summarize")
    if first is None:
        prior = state.summary
        first = prior.seq if prior is not None and prior.seq is not None and prior.seq <= last_committed else 0
    if last is None:
        last = last_committed
    if last > last_committed:
        raise SummarySpanError(session, last, f"last_seq is past the session's last committed entry "
                               f"(seq {last_committed})")
    if first > last:
        raise SummarySpanError(session, first, f"first_seq {first} is after last_seq {last}: not a span")
    start = first
    _, entries = yield call(log.read_suffix, session, lambda es: bool(es) and es[0].seq <= start)
    first_entry = _at(entries, first)
    last_entry = _at(entries, last)
    if first_entry is None or last_entry is None:
        raise SummarySpanError(session, first if first_entry is None else last, "no such entry in the session's chain")
    for seq, entry, want, name in ((first, first_entry, want_first, "first_hash"),
                                   (last, last_entry, want_last, "last_hash")):
        if want is not None and entry.hash.hex() != want:
            raise SummarySpanError(session, seq, f"{name} {want} is not the hash of the entry at seq {seq} "
                                   f"({entry.hash.hex()})")
    return SummarySpan(first, first_entry.hash.hex(), last, last_entry.hash.hex())


def _at(entries: Sequence[Entry], seq: int) -> Entry | None:
    if not entries:
        return None
    i = seq - entries[0].seq
    return entries[i] if 0 <= i < len(entries) and entries[i].seq == seq else None


def summary_data(
    state: SessionState, span: SummarySpan, summary: list[dict[str, Any]], keep_last: int
) -> dict[str, Any]:
    """The data of a summary entry: its span, the summary items, how many of the latest
    history items it keeps after them, and the whole state after it (the history being
    the summary items then the kept ones)."""
    kept = list(state.history[len(state.history) - keep_last:]) if keep_last else []
    seed = SessionState(
        system_prompt=state.system_prompt, config=state.config, history=[*summary, *kept],
        turn_count=state.turn_count, locked_prefix_len=None, last_run_interrupted=state.last_run_interrupted,
        last_outcome=state.last_outcome,
    ).to_seed()
    return {"span": span.to_data(), "summary": summary, "keep_last": keep_last, "state": seed}
