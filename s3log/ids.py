"""Session ids: UUIDv7 generation and validation of caller-supplied ids."""

from __future__ import annotations

import os
import random
import re
import threading
import time
import uuid

from .errors import InvalidSessionIdError

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_SESSION_ID_LENGTH = 128

_lock = threading.Lock()
#: How far back the clock may step with ids still ordered after the ones before.
_MAX_STEP_BACK_MS = 60_000
_last_ms = 0
_counter = 0


def uuid7(now_ms: int | None = None, rng: random.Random | None = None) -> str:
    """Return a new UUIDv7 (RFC 9562) as a string.

    Ids made in the same millisecond by this process stay ordered: the 12-bit
    ``rand_a`` field is a counter seeded randomly each millisecond, so sorting ids
    sorts sessions by creation time, which is what "newest first" listing relies on.
    ``now_ms`` and ``rng`` let a caller (the deterministic simulator, through
    :class:`s3log.env.Env`) fix the clock and the random bits.
    """
    if rng is not None:
        # Deterministic ids: no process-wide counter, everything from the given source.
        ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        return _assemble(ms, rng.getrandbits(12), rng.getrandbits(62))
    global _last_ms, _counter
    with _lock:
        ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        # Ordered across a small step back of the clock; a large one is another clock
        # (a test's virtual one), not to be carried into every later id of the process.
        if _last_ms - _MAX_STEP_BACK_MS <= ms <= _last_ms:
            ms = _last_ms
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                ms += 1
                _counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        else:
            _counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        _last_ms = ms
        rand_a = _counter
    return _assemble(ms, rand_a, int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1))


def _assemble(ms: int, rand_a: int, rand_b: int) -> str:
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= rand_a << 64
    value |= 0b10 << 62
    value |= rand_b
    return str(uuid.UUID(int=value))


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is safe to use as one path segment of a key.

    Safe means: a string of 1 to 128 characters from ``A-Z a-z 0-9 . _ -``, starting
    with a letter or digit, and without ``..``. Anything else raises
    :class:`InvalidSessionIdError` naming the id and the rule it broke.
    """
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(session_id, "must be a string")
    if not session_id:
        raise InvalidSessionIdError(session_id, "must not be empty")
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        raise InvalidSessionIdError(
            session_id, f"longer than {MAX_SESSION_ID_LENGTH} characters"
        )
    if ".." in session_id:
        raise InvalidSessionIdError(session_id, "must not contain '..'")
    if not _SAFE.fullmatch(session_id):
        raise InvalidSessionIdError(
            session_id,
            "only letters, digits, '.', '_' and '-' are allowed, starting with a letter or digit",
        )
    return session_id


def uuid7_time_ms(session_id: str) -> int | None:
    """Return the creation time in ms encoded in a UUIDv7 id, or None for other ids."""
    try:
        u = uuid.UUID(session_id)
    except ValueError:
        return None
    if u.version != 7:
        return None
    return u.int >> 80
