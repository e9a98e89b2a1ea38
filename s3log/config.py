"""Configuration of a log: its tunables (:class:`LogConfig`) and retry policy
(:class:`RetryPolicy`), and the shapes of the verbs' options (:data:`OnConflict`,
:data:`Selector`).

Plain values, no I/O: the drivers read the retry policy, the protocol procedures
the rest. Exported from :mod:`s3log`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from s3log._format.codec import check_format_version
from s3log._format.layout import MAX_SEGMENTS
from s3log._format.manifest import max_manifest_length
from s3log._format.values import FORMAT_VERSION, Head
from s3log.env import DEFAULT_ENV, Env
from s3log.errors import InvalidArgumentError
from s3log.signing import Signer, Verifier, check_log_id

if TYPE_CHECKING:
    from s3log.encryption import Encryption

#: The largest merge fan-out whose manifest stays within the MAX_SEGMENTS a reader
#: accepts, however many segments a session writes (2**64 bounds any count): a level
#: holds fewer than ``fanout`` segments, so a larger fan-out could make a writer
#: acknowledge a head that every reader refuses.
MAX_FANOUT = 512
assert max_manifest_length(2**64, MAX_FANOUT) <= MAX_SEGMENTS < max_manifest_length(2**64, 2 * MAX_FANOUT)

#: What a conflict does to a writer's commit (``Log.create``/``open``'s ``on_conflict``,
#: ``Writer.on_conflict``): ``"fork"`` continues in a new session, ``"raise"`` raises
#: :class:`~s3log.ConflictError` and leaves the entries queued.
OnConflict = Literal["fork", "raise"]

#: What :meth:`s3log.Log.compact` keeps of a session: called with its logical history
#: (``{"kind", "ts", "data"}`` maps) and its head, it returns the maps to keep, or None
#: for no change (an empty list deletes the session).
Selector = Callable[[list[dict[str, Any]], Head], list[dict[str, Any]] | None]

#: Days the activity index keeps a day's markers at least: ``expire`` prunes a day once
#: it is older than this or than its ``idle_for`` (docs/operations.md).
ACTIVITY_KEEP_DAYS = 35


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How transient failures are retried: exponential backoff with full jitter, bounded."""

    attempts: int = 8
    initial: float = 0.02
    max_backoff: float = 1.0
    max_time: float = 30.0

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (full jitter from ``rng``)."""
        upper = min(self.max_backoff, self.initial * (2 ** (attempt - 1)))
        return (rng or DEFAULT_ENV.rng).uniform(0, upper)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Tunables of a log.

    ``tail_max_bytes`` bounds the head: while the head with the new entries inline is
    at most this big, a commit is one PUT; past it the tail is flushed to a segment
    (32 KiB: a short session restores in one GET; decision record 0027).
    ``tail_per_commit``: a commit adding more than ``tail_max_bytes / tail_per_commit``
    (a group commit of many appenders, a long output) may keep its head inline up to
    that many times its own bytes, while a next commit of its size could still flush
    within ``pending_max_bytes``: one PUT instead of a head and a segment. 0 makes
    ``tail_max_bytes`` a strict bound (decision record 0033).
    ``pending_max_bytes``: the flushing commit writes that segment beside its head (one
    round trip) while the head keeping the entries inline is at most this big, until
    the next commit references the segment; a bigger head is written after its
    segment instead (two round trips), and 0 always does that. Up to 256 KiB,
    uploading the entries twice costs less than a round trip.
    ``fanout`` is the merge fan-out, 2 to :data:`MAX_FANOUT` (see :mod:`s3log._format.manifest`). ``max_parallel``
    bounds concurrent requests of one operation. ``cache_levels``: a writer keeps the
    entries of segments below this level in memory, so the merges it will do soon
    need no GET. ``commit_deadline_ms``: a commit whose head PUT is still undecided
    this long after it wrote a segment gives up (nothing acknowledged; the next commit
    writes a new segment), so gc may treat an unreferenced segment older than twice
    this (a request sent just before the deadline may take that long again to land)
    as garbage no commit will ever reference. ``env``: clock, randomness and new ids.
    ``verify_preconditions``: probe, before the first write or delete of any verb to a
    store, that it honours ``If-None-Match`` and ``If-Match``, stale ETags and racing
    conditional PUTs included (see :func:`s3log._protocol.probe.probe_preconditions`).
    ``activity_index``: a session's first
    commit of each UTC day also writes a tiny marker (:mod:`s3log._protocol.activity`), so
    "sessions active since T" need not read every head. ``format_version``: the
    format heads and segments are written in (2, the default, or 1 so that s3log 0.1
    readers can read what is written; both are read, see docs/format.md).
    """

    tail_max_bytes: int = 32 * 1024
    pending_max_bytes: int = 256 * 1024
    tail_per_commit: int = 4
    fanout: int = 4
    max_parallel: int = 16
    cache_levels: int = 3
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    commit_deadline_ms: int = 10 * 60 * 1000
    env: Env = DEFAULT_ENV
    verify_preconditions: bool = True
    #: Signs every head this log writes (:mod:`s3log.signing`); None: heads are unsigned.
    signer: Signer | None = None
    #: Every head this log reads must be signed by a key it trusts; None: not checked.
    verifier: Verifier | None = None
    #: The identity signed heads are bound to (signed and verified as heads of this log);
    #: None: ``<bucket>/<prefix>`` of the log's store (:func:`s3log.signing.default_log_id`).
    #: A copy of a whole log keeps verifying when its readers name the original's identity.
    log_id: str | None = None
    activity_index: bool = True
    format_version: int = FORMAT_VERSION
    #: How many of the newest idempotency keys of appends a head remembers (decision
    #: 0037): a retry is recognised while fewer than this many keyed appends followed
    #: the first. 0 remembers none (keys still join retries within one writer).
    append_key_window: int = 32
    #: Encrypts the data of every entry this log appends (:mod:`s3log.encryption`), and
    #: decrypts what it reads; None: data is stored as given (and an encrypted session
    #: is refused where its data would be needed).
    encryption: Encryption | None = None

    def __post_init__(self) -> None:
        check_format_version(self.format_version)
        if self.log_id is not None:
            check_log_id(self.log_id)
        # Checked here, before anything is written: a bad value would otherwise surface
        # at some later flush (fanout < 2) or, worse, in what readers refuse (fanout too big).
        for name in ("tail_max_bytes", "pending_max_bytes", "tail_per_commit", "cache_levels", "append_key_window"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise InvalidArgumentError(name, f"must be an integer >= 0, not {value!r}")
        if type(self.fanout) is not int or not 2 <= self.fanout <= MAX_FANOUT:
            raise InvalidArgumentError("fanout", f"must be an integer from 2 to {MAX_FANOUT}, not {self.fanout!r}")
        for name in ("max_parallel", "commit_deadline_ms"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise InvalidArgumentError(name, f"must be an integer >= 1, not {value!r}")
