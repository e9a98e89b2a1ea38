"""Where objects live: the key layout of format v1.

Under a prefix ``P`` (default ``s3log``)::

    P/sessions/{sid}/head
    P/sessions/{sid}/seg/{first_seq:012d}-{last_hash_hex}-{nonce}.cbor
    P/sessions/{sid}/forks/{child_sid}

Segments written before the nonce was added (``{first_seq:012d}-{last_hash_hex}.cbor``)
stay readable. The nonce makes every segment write a new key: a commit never finds
"its" segment already there from an earlier attempt, so it never references an
object whose age it does not know (see docs/design.md, gc).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from s3log._format.ids import validate_session_id
from s3log.errors import InvalidPrefixError

if TYPE_CHECKING:
    from s3log.signing.keys import Verifier

DEFAULT_PREFIX = "s3log"
#: Segments the head of a session may list: a levelled manifest holds a few dozen at
#: most, so a head naming more is hostile or corrupt, and is refused before any GET.
MAX_SEGMENTS = 4096

#: A segment's name: its first seq as ``{:012d}`` writes it (12 ASCII digits, or more
#: without a leading zero from 10^12 on: one seq, one spelling), its last hash, a nonce.
_SEGMENT_NAME = re.compile(r"([0-9]{12}|[1-9][0-9]{12,})-([0-9a-f]{64})(?:-([0-9a-f]{16}))?\.cbor")
_PREFIX_PART = re.compile(r"[A-Za-z0-9!_.*'()=+,;:@ -]+")


def normalize_prefix(prefix: object) -> str:
    """Validate a key prefix and strip slashes at both ends.

    An empty prefix is allowed (keys start at the root). Parts are separated by single
    slashes; ``.`` and ``..`` parts, empty parts (``a//b``) and characters outside
    S3's safe set are refused with :class:`~s3log.errors.InvalidPrefixError`.
    """
    if not isinstance(prefix, str):
        raise InvalidPrefixError(prefix, "must be a string")
    stripped = prefix.strip("/")
    if not stripped:
        return ""
    if len(stripped) > 512:
        raise InvalidPrefixError(prefix, "longer than 512 characters")
    for part in stripped.split("/"):
        if not part:
            raise InvalidPrefixError(prefix, "has an empty part ('//')")
        if part in (".", ".."):
            raise InvalidPrefixError(prefix, f"has a {part!r} part")
        if not _PREFIX_PART.fullmatch(part):
            raise InvalidPrefixError(prefix, f"part {part!r} has characters outside A-Z a-z 0-9 !_.*'()=+,;:@ -")
    return stripped


#: Head keys made, by prefix and session id (ids that passed validation only).
_HEADS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True, slots=True)
class Layout:
    """Computes the keys of one store prefix.

    ``verifier``: when set, every head read through this layout must be signed by a
    key it trusts (:mod:`s3log.signing`). ``log_id``: the identity of the log that
    signed heads are bound to (:func:`s3log.signing.default_log_id`, or the one
    ``LogConfig(log_id=...)`` names); heads are signed and verified as heads of it.
    Both ride on the layout because every procedure that reads or plans a head takes
    the layout; neither is part of a layout's identity.
    """

    prefix: str = DEFAULT_PREFIX
    verifier: Verifier | None = field(default=None, compare=False, repr=False)
    log_id: str | None = field(default=None, compare=False, repr=False)

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
        # Every commit asks for it a few times: the id is validated once.
        if type(session) is not str:  # (a str subclass may format or hash otherwise)
            return self.session_dir(session) + "head"
        key = _HEADS.get((self.prefix, session))
        if key is None:
            key = self.session_dir(session) + "head"
            if len(_HEADS) >= 1024:
                _HEADS.clear()
            _HEADS[(self.prefix, session)] = key
        return key

    def segment_dir(self, session: str) -> str:
        """The prefix of a session's segment objects."""
        return self.session_dir(session) + "seg/"

    def segment(self, session: str, first_seq: int, last_hash: bytes, nonce: str | None = None) -> str:
        """The key of a segment starting at ``first_seq`` and ending with ``last_hash``.

        ``nonce`` (16 hex digits) makes the key unique to one write; None gives the
        form of segments written before nonces existed.
        """
        tail = f"-{nonce}" if nonce else ""
        return f"{self.segment_dir(session)}{first_seq:012d}-{last_hash.hex()}{tail}.cbor"

    def is_segment_of(self, session: str, key: str) -> bool:
        """Whether ``key`` is a well-formed segment key inside ``session``'s folder."""
        base = self.segment_dir(session)
        return key.startswith(base) and _SEGMENT_NAME.fullmatch(key[len(base):]) is not None

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
