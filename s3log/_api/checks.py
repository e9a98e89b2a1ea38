"""Checks of the log API's arguments, made before anything is read or written: each
raises :class:`~s3log.InvalidArgumentError` naming the argument (and the session)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from s3log.errors import InvalidArgumentError


def check_on_conflict(value: object, session: str | None = None) -> None:
    """``on_conflict`` is ``"fork"`` or ``"raise"``."""
    if value not in ("fork", "raise"):
        raise InvalidArgumentError("on_conflict", f"must be 'fork' or 'raise', not {value!r}", session=session)


def check_reducer(reducer: object, session: str | None = None) -> None:
    """``reducer`` is None or has the reducer protocol's ``initial`` and ``apply``."""
    if reducer is not None and not (callable(getattr(reducer, "initial", None))
                                    and callable(getattr(reducer, "apply", None))):
        raise InvalidArgumentError("reducer", f"must have initial() and apply(state, entry), not {reducer!r:.80}",
                                   session=session)


def check_callable(value: object, name: str, *, optional: bool = False, session: str | None = None) -> None:
    """``value`` (named ``name``) is callable (or None when ``optional``)."""
    if not (callable(value) or (optional and value is None)):
        raise InvalidArgumentError(name, f"must be callable, not {value!r:.80}", session=session)


def check_session_ids(ids: object) -> Sequence[str]:
    """``ids`` is a sequence of session ids, not one id (a string is not a list of its letters)."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Sequence):
        raise InvalidArgumentError("session_ids", f"must be a list of session ids, not {ids!r:.80}")
    return ids


def check_pairs(entries: object, session: str) -> list[tuple[Any, Any]]:
    """``entries`` is a sequence of ``(kind, data)`` pairs (a mapping is not one)."""
    bad = "must be a list of (kind, data) pairs"
    if isinstance(entries, str | bytes | Mapping) or not isinstance(entries, Sequence):
        raise InvalidArgumentError("entries", f"{bad}, not {entries!r:.80}", session=session)
    out: list[tuple[Any, Any]] = []
    for i, pair in enumerate(entries):
        if isinstance(pair, str | bytes | Mapping) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise InvalidArgumentError("entries", f"{bad}: item {i} is {pair!r:.80}", session=session)
        out.append((pair[0], pair[1]))
    return out


def check_keys(keys: object, session: str) -> Sequence[str | None] | None:
    """``keys`` is None or a sequence (one key or None per entry; its items are checked with the entries)."""
    if keys is not None and (isinstance(keys, str | bytes) or not isinstance(keys, Sequence)):
        raise InvalidArgumentError("keys", f"must be a list of one key (or None) per entry, not {keys!r:.80}",
                                   session=session)
    return keys


def check_type(value: object, kind: type, name: str, *, optional: bool = True, session: str | None = None) -> None:
    """``value`` (named ``name``) is a ``kind`` (or None when ``optional``)."""
    if not (isinstance(value, kind) or (optional and value is None)):
        raise InvalidArgumentError(name, f"must be a {kind.__name__}, not {value!r:.80}", session=session)


def check_writer_args(reducer: object, on_conflict: object, session: str | None = None) -> None:
    """A writer's ``reducer`` and ``on_conflict`` (create, open)."""
    check_reducer(reducer, session)
    check_on_conflict(on_conflict, session)
