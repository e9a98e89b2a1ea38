"""The registry of live agent sessions, per log: closing a log (or the interpreter
exiting) drains what its sessions still buffer, and a session dropped with records
unsaved is held until then, never lost quietly.

Its own room: process-wide state (a lock, weak maps, the exit hook), apart from the
decisions of :mod:`s3log.agent.core`.
"""

from __future__ import annotations

import atexit
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any

from s3log.agent.errors import RecordsLostWarning

if TYPE_CHECKING:
    from s3log.agent.core import SessionCore

_LOCK = threading.Lock()
_LIVE: weakref.WeakKeyDictionary[Any, weakref.WeakSet[SessionCore]] = weakref.WeakKeyDictionary()
# Sessions holding records not yet committed, held strongly: a session dropped before
# its buffer was drained is kept until close(log) or exit commits it, never lost quietly.
_UNSAVED: set[SessionCore] = set()
_EXIT_HOOKED = False


def track(session: SessionCore) -> None:
    """Hold ``session`` while it has unsaved records; let it go once it has none."""
    with _LOCK:
        if session.unsaved():
            _UNSAVED.add(session)
        else:
            _UNSAVED.discard(session)


def register(session: SessionCore) -> None:
    """Count ``session`` among its log's live sessions (hooking the log's close, and exit, once)."""
    global _EXIT_HOOKED
    with _LOCK:
        sessions = _LIVE.get(session.log)
        first_on_log = sessions is None
        if sessions is None:
            sessions = _LIVE[session.log] = weakref.WeakSet()
        sessions.add(session)
        hook_exit, _EXIT_HOOKED = not _EXIT_HOOKED, True
    if hook_exit:
        _hook_exit()
    if first_on_log:
        session._hook_log_close()


def live_sessions(log: Any) -> list[SessionCore]:
    """The agent sessions opened on ``log`` that are still referenced."""
    with _LOCK:
        return list(_LIVE.get(log, ()))


def raise_first(errors: list[tuple[str, BaseException]]) -> None:
    """Raise the first drain error, noting which other sessions failed too."""
    if not errors:
        return
    first = errors[0][1]
    for sid, err in errors[1:]:
        first.add_note(f"session {sid} could not be drained either: {err}")
    raise first


def _hook_exit() -> None:
    # threading's exit hooks run before concurrent.futures stops taking work (a commit
    # that writes a segment uses the log's thread pool) and before non-daemon threads
    # are joined; hooks run newest first, and concurrent.futures registered its own at
    # import, before any session existed. atexit is the fallback on interpreters without it.
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(drain_at_exit)
            return
        except RuntimeError:
            pass  # the interpreter is already shutting down
    atexit.register(drain_at_exit)


def drain_at_exit() -> None:
    """Commit what live sessions still buffer; warn, naming each session and count, for what cannot be."""
    with _LOCK:
        sessions = [s for group in _LIVE.values() for s in group]
    for session in sessions:
        lost = session.unsaved()
        if not lost:
            continue
        sid = session.session_id
        try:
            session._flush_at_exit()
        except Exception as exc:
            warnings.warn(RecordsLostWarning(
                f"s3log.agent: session {sid}: {lost} buffered record(s) lost at exit, not committed: "
                f"{type(exc).__name__}: {exc}"
            ), stacklevel=1)
