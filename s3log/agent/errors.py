"""The errors and warnings of agent sessions (exported from :mod:`s3log.agent`).

Their own room: the argument checks, the procedures and both shells raise them, and a
worker process's error must unpickle without importing the shells.
"""

from __future__ import annotations

from typing import Any

from s3log.errors import InvalidEntryError, S3LogError


class SessionScopeError(S3LogError):
    """A session's header labels are not the ones the caller is scoped to; nothing was written."""

    def __init__(self, session: str, label: str, expected: Any, found: Any, *, missing: bool = False) -> None:
        self.session = session
        self.label = label
        self.expected = expected
        self.found = found
        self.missing = missing
        what = "no such label" if missing else repr(found)
        super().__init__(
            f"session {session} is out of scope: label {label!r} expected {expected!r}, found {what}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_scope_error, (self.session, self.label, self.expected, self.found, self.missing))


def _scope_error(session: str, label: str, expected: Any, found: Any, missing: bool) -> SessionScopeError:
    return SessionScopeError(session, label, expected, found, missing=missing)


class SessionBusy(S3LogError):
    """Another worker holds a live lease on the session and its turn is open.

    ``owner`` and ``expires_at`` (ms) say who and until when; restore again after that,
    pass ``wait=`` to wait for it, or ``force=True`` to repair the turn anyway.
    """

    def __init__(self, session: str, owner: str, expires_at: int) -> None:
        self.session = session
        self.owner = owner
        self.expires_at = expires_at
        super().__init__(
            f"session {session} is busy: worker {owner!r} holds it with an open turn until {expires_at} ms"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable (a worker process's error must reach its parent intact).
        return (SessionBusy, (self.session, self.owner, self.expires_at))


class AgentArgumentError(S3LogError, ValueError):
    """An argument of an agent-session call is of the wrong shape (raised before anything is written)."""


class AgentItemError(InvalidEntryError, AgentArgumentError):
    """An item-taking argument of a recording verb (``items``, ``new_items``,
    ``history``, ``call_ids``) is malformed. An :class:`~s3log.InvalidEntryError`, as
    documented for them, and an :class:`AgentArgumentError`, as every argument of the
    wrong shape; raised before anything is buffered."""


class SummarySpanError(AgentArgumentError):
    """The span a summary names is not a contiguous span of the session's committed
    chain, or a hash it names is not the entry's at that seq. ``session`` and ``seq``
    (the seq at fault, or None) say where; nothing was written."""

    def __init__(self, session: str, seq: int | None, reason: str) -> None:
        self.session = session
        self.seq = seq
        self.reason = reason
        where = f"session {session}" if seq is None else f"session {session}, seq {seq}"
        super().__init__(f"summary span refused ({where}): {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (SummarySpanError, (self.session, self.seq, self.reason))


class RecordsLostWarning(UserWarning):
    """Buffered records of an agent session could not be committed before the interpreter exited."""
