"""The error hierarchy of s3log.

Every error s3log raises on purpose is an :class:`S3LogError`. Messages say what was
expected, what was found, and which session, seq or key was involved, so a log line
is enough to find the object at fault.
"""

from __future__ import annotations

from typing import Any


class S3LogError(Exception):
    """Base class of every error raised by s3log."""


class InvalidSessionIdError(S3LogError, ValueError):
    """A session id has characters or a shape that cannot be used in a key."""

    def __init__(self, session_id: object, reason: str) -> None:
        self.session_id = session_id
        super().__init__(f"invalid session id {session_id!r}: {reason}")


class InvalidPrefixError(S3LogError, ValueError):
    """A key prefix cannot be used (``..`` parts, empty parts, unsafe characters)."""

    def __init__(self, prefix: object, reason: str) -> None:
        self.prefix = prefix
        super().__init__(f"invalid key prefix {prefix!r}: {reason}")


class InvalidArgumentError(S3LogError, ValueError):
    """An argument of an s3log call has the wrong type or value (named in the message)."""

    def __init__(self, argument: str, reason: str, *, session: str | None = None) -> None:
        self.argument = argument
        self.session = session
        where = f" (session {session})" if session else ""
        super().__init__(f"invalid argument {argument}{where}: {reason}")


class AppendKeyReused(InvalidArgumentError):
    """An append's idempotency key names an entry of other content (kind or data) than
    this append's: a retry must repeat what it retries. Raised before anything is written."""

    def __init__(self, key: str, session: str | None, stored: str) -> None:
        self.key = key
        super().__init__("key", f"{key!r} was used for another entry ({stored}); "
                                "a retry must append the same kind and data", session=session)


class PreconditionsIgnoredError(S3LogError):
    """The store ignored a conditional-write header: none of s3log's guarantees hold on it."""

    def __init__(self, bucket: str, detail: str) -> None:
        self.bucket = bucket
        self.detail = detail
        super().__init__(
            f"the store behind bucket {bucket!r} ignores conditional writes: {detail}. "
            "s3log needs If-None-Match and If-Match on PUT (S3 and most S3-compatible stores honour them)."
        )


class InvalidEntryError(S3LogError, ValueError):
    """An entry cannot be appended (bad kind, data CBOR cannot encode, bad ts)."""

    def __init__(self, kind: object, reason: str, *, session: str | None = None) -> None:
        self.kind = kind
        self.session = session
        where = f" in session {session}" if session else ""
        super().__init__(f"invalid entry of kind {kind!r}{where}: {reason}")


class SessionNotFound(S3LogError, LookupError):
    """The session has no head object (never created, or deleted)."""

    def __init__(self, session: str, detail: str = "") -> None:
        self.session = session
        super().__init__(f"session {session} not found" + (f": {detail}" if detail else ""))


class SessionExpired(SessionNotFound):
    """The session was expired by retention (``Log.expire``): its head is a tombstone.

    A :class:`SessionNotFound`, so code that handles deleted sessions handles expired
    ones; ``expired_at`` (ms) says when.
    """

    def __init__(self, session: str, expired_at: int | None = None) -> None:
        self.expired_at = expired_at
        super().__init__(session, "it was expired by retention" + (f" at {expired_at} ms" if expired_at else ""))


class EntryNotFound(S3LogError, LookupError):
    """A seq or hash asked for is not in the session's chain."""

    def __init__(self, session: str, what: str) -> None:
        self.session = session
        self.what = what
        super().__init__(f"session {session} has no entry at {what}")


class SessionExists(S3LogError):
    """A session with this id already has a head object."""

    def __init__(self, session: str) -> None:
        self.session = session
        super().__init__(f"session {session} already exists")


class ConflictError(S3LogError):
    """Another writer advanced the head this writer built on.

    ``expected`` is the head version (seq, hash, etag) the writer knew; ``found`` is
    what is stored now (``None`` when it could not be read); ``landed`` lists the
    entries of the batch that are durable after all (usually none).
    """

    def __init__(
        self,
        session: str,
        expected: dict[str, Any],
        found: dict[str, Any] | None,
        *,
        landed: list[Any] | None = None,
    ) -> None:
        self.session = session
        self.expected = expected
        self.found = found
        # Entries of the failed commit found durable in the stored chain (a write
        # whose response was lost but that landed before the other writer's).
        self.landed = landed or []
        super().__init__(
            f"conflict on session {session}: expected head {expected}, found {found}"
        )


class SessionReplaced(ConflictError):
    """``Log.delete`` refused: the id now holds another session than the one it read.

    Raised when an expired session's tombstone (or a deleted session's id) was taken
    over by a new session between the delete's read of the head and its conditional
    DELETE. The new session is not the one asked for: nothing of it is deleted, and
    nothing of the old one either (``Log.delete`` deletes the rest only after the head).
    ``expected`` and ``found`` summarise the two heads (their ``created_at`` and
    ``creator`` differ). ``maybe_deleted``: the delete's reply was lost, so the head it
    read may have been deleted by it before the new session was created at the id.
    """

    def __init__(
        self, session: str, expected: dict[str, Any], found: dict[str, Any], *, maybe_deleted: bool = False
    ) -> None:
        super().__init__(session, expected, found)
        self.maybe_deleted = maybe_deleted
        done = ("the head read may have been deleted (the reply was lost), nothing else was" if maybe_deleted
                else "nothing was deleted")
        # ConflictError's message speaks of writers; this one says what happened here.
        self.args = (
            f"session {session} not deleted: the id now holds another session (created at "
            f"{found.get('created_at')}, creator {found.get('creator')!r}) than the one read "
            f"(created at {expected.get('created_at')}, creator {expected.get('creator')!r}); {done}",
        )


class CorruptionError(S3LogError):
    """A stored object does not verify (hash, chain link, seq, key or shape)."""

    def __init__(self, key: str, reason: str, *, seq: int | None = None) -> None:
        self.key = key
        self.seq = seq
        self.reason = reason
        at = f" at seq {seq}" if seq is not None else ""
        super().__init__(f"corrupt object {key}{at}: {reason}")


class SegmentMissing(CorruptionError):
    """A segment the head read lists is not in the store.

    Corruption if the head is still current; if the head has moved since it was read,
    merely a stale view (gc collected a segment a newer head no longer lists).
    """


class FormatVersionError(S3LogError):
    """A head or segment carries a format version this release cannot read."""

    def __init__(self, key: str, found: object, supported: int | tuple[int, ...]) -> None:
        self.key = key
        self.found = found
        self.supported = supported
        versions = ", ".join(map(str, supported)) if isinstance(supported, tuple) else str(supported)
        super().__init__(
            f"object {key} has format version {found!r}; this s3log reads version {versions}"
        )


class StoreError(S3LogError):
    """The object store failed in a way s3log could not recover from.

    Keeps the store's error code and request id so the failure can be traced.
    """

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        code: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        self.key = key
        self.code = code
        self.status = status
        self.request_id = request_id
        parts = [message]
        if key:
            parts.append(f"key={key}")
        if code:
            parts.append(f"code={code}")
        if status:
            parts.append(f"status={status}")
        if request_id:
            parts.append(f"request_id={request_id}")
        super().__init__(" ".join(parts))


class ObjectNotFound(StoreError):
    """404: the object does not exist."""


class PreconditionFailed(StoreError):
    """412: If-Match did not match, or If-None-Match: * found an object."""


class ConditionalRequestConflict(StoreError):
    """409: a conflicting conditional write was in flight at the same time."""


class ConditionalDeleteUnsupported(StoreError):
    """The store cannot make a DELETE conditional (``If-Match``): obstore has no way to.

    Nothing was sent. :func:`s3log._protocol.delete.delete_session` then falls back to a plain
    DELETE, keeping on that store alone the race a conditional DELETE closes.
    """


class StoreForkedError(StoreError):
    """A store was used in a process forked after its client sent requests, and the
    client cannot be rebuilt here: one passed in (``client=``) whose connections, or
    whose Rust runtime (obstore), belong to the parent process.

    Nothing was sent. Build the store (or its client) in the child, after the fork, or
    start children with multiprocessing's ``spawn`` or ``forkserver``; a store that
    built its own client rebuilds it in the child by itself (docs/stores.md).
    """


class TransientStoreError(StoreError):
    """Throttling, 5xx, timeout or a broken connection.

    For a read the request can simply be repeated. For a write the outcome is
    unknown: the object may or may not have been written.
    """


class WriterBusyError(S3LogError, RuntimeError):
    """An async writer was used on one event loop while a commit of it is pending on
    another loop that may still run it: finish (or close) that loop first."""

    def __init__(self, session: str) -> None:
        self.session = session
        super().__init__(f"writer of session {session} has a commit pending on another event loop; "
                         "finish (or close) that loop before using the writer on this one")


class MissingExtraError(S3LogError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it.

    ``module`` is the module that failed to import and ``extra`` the s3log extra to
    install (``pip install "s3log[extra]"``).
    """

    def __init__(self, module: str, extra: str, detail: str = "") -> None:
        self.module = module
        self.extra = extra
        text = f"{module} is not installed: it comes with s3log's {extra} extra: pip install 's3log[{extra}]'"
        super().__init__(text + (f" ({detail})" if detail else ""), name=module)


class EncryptionError(S3LogError):
    """An encrypted session's data cannot be sealed or opened: no key provider configured,
    a key provider that cannot unwrap its data key (a wrong key), or a ciphertext that
    fails authentication. Names the session and the data key involved."""

    def __init__(self, session: str | None, reason: str, *, key_ref: str | None = None) -> None:
        self.session = session
        self.key_ref = key_ref
        self.reason = reason
        where = f"session {session}" if session else "encrypted data"
        key = f" (data key {key_ref})" if key_ref else ""
        super().__init__(f"{where}{key}: {reason}")


class SessionShredded(EncryptionError):
    """A data key of this session's entries was destroyed (:meth:`s3log.Log.shred`): its
    chain still verifies, its data can no longer be read by anyone."""

    def __init__(self, session: str | None, key_ref: str) -> None:
        super().__init__(session, "its data key was destroyed (crypto-shredded): the chain verifies, "
                         "the data cannot be read", key_ref=key_ref)
