"""What :class:`~s3log.Writer` and :class:`~s3log.AsyncWriter` expose alike: :class:`WriterVerbs`."""

from __future__ import annotations

from typing import Generic

from s3log._api.checks import check_on_conflict
from s3log._api.queue import CommitQueue, ForkListener
from s3log._format.values import Head
from s3log.config import OnConflict
from s3log.reducer import S
from s3log.results import ForkInfo


class WriterVerbs(Generic[S]):
    """What :class:`~s3log.Writer` and :class:`~s3log.AsyncWriter` expose alike.

    ``S`` is the state type of the writer's reducer (``Any`` when not known).
    """

    _core: CommitQueue[S]

    @property
    def session_id(self) -> str:
        """The session this writer appends to now (changes when it forks)."""
        return self._core.ws.session

    @property
    def head(self) -> Head:
        """The last head this writer committed or loaded."""
        return self._core.ws.head

    @property
    def state(self) -> S:
        """The reducer state of the committed chain."""
        return self._core.ws.state

    @property
    def forks(self) -> list[ForkInfo]:
        """Every fork this writer made, oldest first."""
        return list(self._core.forks)

    @property
    def pending(self) -> int:
        """How many entries wait for a commit."""
        return self._core.pending_count

    @property
    def on_conflict(self) -> OnConflict:
        """What a conflict does: ``"fork"`` or ``"raise"``."""
        return self._core.on_conflict

    @on_conflict.setter
    def on_conflict(self, value: OnConflict) -> None:
        check_on_conflict(value, self._core.ws.session)
        self._core.on_conflict = value

    def hold_lease(self, owner: str, ttl_ms: int) -> None:
        """Record a lease (``owner``, expiring ``ttl_ms`` after each commit) with every commit.

        Advisory: other writers are not refused, but an agent session's ``restore``
        treats an open turn under a live lease as a running worker's (docs/agent.md).
        """
        self._core.hold_lease(owner, ttl_ms)

    def release_lease(self) -> None:
        """Clear this writer's lease from the head with its next commit (or renewal)."""
        self._core.release_lease()

    @property
    def lease_owner(self) -> str | None:
        """The owner this writer records a lease for, if it holds one."""
        plan = self._core.lease
        return plan.owner if plan is not None and plan.ttl_ms is not None else None

    def on_fork(self, listener: ForkListener) -> None:
        """Call ``listener`` with a :class:`ForkInfo` whenever a conflict makes this writer fork."""
        self._core.add_fork_listener(listener)
