"""Session ids: validation of caller-supplied ids, and the bits of a UUIDv7.

Making new ids needs a clock and randomness: :func:`s3log.env.uuid7`.
"""

from __future__ import annotations

import re
import uuid

from s3log.errors import InvalidSessionIdError

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_SESSION_ID_LENGTH = 128


def assemble_uuid7(ms: int, rand_a: int, rand_b: int) -> str:
    """The UUIDv7 (RFC 9562) of a millisecond time and its 12 and 62 random bits."""
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
