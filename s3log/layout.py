"""Where objects live: the key layout of format v1.

Under a prefix ``P`` (default ``s3log``)::

    P/sessions/{sid}/head
    P/sessions/{sid}/seg/{first_seq:012d}-{last_hash_hex}.cbor
    P/sessions/{sid}/forks/{child_sid}
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .ids import validate_session_id

DEFAULT_PREFIX = "s3log"

_SEGMENT_NAME = re.compile(r"(\d{12})-([0-9a-f]{64})\.cbor")


def normalize_prefix(prefix: str) -> str:
    """Strip slashes at both ends; an empty prefix is allowed (keys start at the root)."""
    return prefix.strip("/")


@dataclass(frozen=True, slots=True)
class Layout:
    """Computes the keys of one store prefix."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", normalize_prefix(self.prefix))

    @property
    def sessions_prefix(self) -> str:
        """The prefix every session directory lives under (ends with '/')."""
        return f"{self.prefix}/sessions/" if self.prefix else "sessions/"

    def session_dir(self, session: str) -> str:
        """``P/sessions/{sid}/``: every object of one session."""
        return f"{self.sessions_prefix}{validate_session_id(session)}/"

    def head(self, session: str) -> str:
        """The key of a session's head object."""
        return self.session_dir(session) + "head"

    def segment_dir(self, session: str) -> str:
        """The prefix of a session's segment objects."""
        return self.session_dir(session) + "seg/"

    def segment(self, session: str, first_seq: int, last_hash: bytes) -> str:
        """The key of a segment starting at ``first_seq`` and ending with ``last_hash``."""
        return f"{self.segment_dir(session)}{first_seq:012d}-{last_hash.hex()}.cbor"

    def forks_dir(self, session: str) -> str:
        """The prefix of a session's fork markers."""
        return self.session_dir(session) + "forks/"

    def fork_marker(self, parent: str, child: str) -> str:
        """The key of the marker saying ``child`` was forked from ``parent``."""
        return self.forks_dir(parent) + validate_session_id(child)

    def session_of(self, key: str) -> str | None:
        """The session id a key belongs to, or None if it is not under this layout."""
        base = self.sessions_prefix
        if not key.startswith(base):
            return None
        rest = key[len(base):]
        sid, sep, _ = rest.partition("/")
        return sid if sep else None


def parse_segment_key(key: str) -> tuple[int, bytes] | None:
    """Return (first_seq, last_hash) from a segment key, or None if it is not one."""
    name = key.rsplit("/", 1)[-1]
    m = _SEGMENT_NAME.fullmatch(name)
    if not m:
        return None
    return int(m.group(1)), bytes.fromhex(m.group(2))
