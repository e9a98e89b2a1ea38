"""Signed heads: the payload a head's signature covers, and signing and verifying it.

:func:`head_payload` builds the bytes docs/format.md ("Signed heads") specifies byte
for byte; it names the log the head belongs to (:func:`default_log_id`, or
``LogConfig(log_id=...)``), so a head copied to another prefix or bucket does not
verify there. :func:`sign_head` / :func:`verify_head` sign and check in place;
:func:`signed_head` / :func:`verified_head` are the same as procedures whose signing
is an op the driver performs. Its own room: the one part of signing the protocol calls.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from s3log._format.cbor import dumps
from s3log._format.values import COMPACTED_FIELD, Head, Signature
from s3log._protocol import ops
from s3log.errors import InvalidArgumentError
from s3log.signing.keys import SignatureError, SignatureRejected, Signer, SigningError, Verifier

if TYPE_CHECKING:
    from s3log._protocol.ops import Proc

#: Tells a head's signed payload from a checkpoint's: a signature made for one
#: can never be passed off as the other, even under the same key.
HEAD_PURPOSE = "s3log/head"
#: The longest log identity accepted (in UTF-8 bytes); a bucket name and a prefix fit.
MAX_LOG_ID_BYTES = 1024




def _meta_digest(meta: Mapping[str, Any]) -> bytes:
    return hashlib.sha256(dumps(meta)).digest()


def check_log_id(log_id: object, name: str = "log_id") -> str:
    """``log_id`` if it is a log identity (non-empty text, at most 1 KiB in UTF-8), else
    :class:`~s3log.errors.InvalidArgumentError` naming ``name``."""
    if not isinstance(log_id, str) or not log_id:
        raise InvalidArgumentError(name, f"must be a non-empty string naming the log, not {log_id!r}")
    try:
        size = len(log_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgumentError(name, f"is not valid text (a lone surrogate): {log_id!r}") from None
    if size > MAX_LOG_ID_BYTES:
        raise InvalidArgumentError(name, f"is {size} bytes long (at most {MAX_LOG_ID_BYTES})")
    return log_id


def default_log_id(store: object, prefix: str) -> str | None:
    """The identity signed heads of a log at ``prefix`` in ``store`` are bound to by default:
    ``<bucket>/<prefix>`` (``prefix`` normalized, so ``"b/"`` for an empty one), from the
    store's ``bucket`` attribute; None for a store that names no bucket.

    A bucket name holds no ``/``, so the identity names one (bucket, prefix) pair.
    """
    bucket = getattr(store, "bucket", None)
    if not isinstance(bucket, str) or not bucket:
        return None
    return f"{bucket}/{prefix}"


def head_payload(head: Head, alg: str, key_id: str, log_id: str) -> bytes:
    """The bytes a head's signature covers (docs/format.md, "Signed heads").

    The deterministic CBOR map of the head's identity: purpose, format version, the
    log's identity ``log_id``, session, last seq and hash, parent pointer, SHA-256 of
    the encoded meta, and the algorithm and key id themselves (so neither can be
    swapped after signing); and, when the head has them, digests of the fields a
    writer decides from: a compaction's mark with the session's creation
    (``compacted_digest``) and the append keys' window (``append_keys_digest``). The
    last hash commits to every entry, so the signature covers the whole chain;
    ``log_id`` binds it to one log.
    """
    # Runs on every commit: the pairs in canonical key order (shorter keys first, then
    # bytewise) encoded as one array whose header is swapped for the map's, as in
    # s3log._format.values; equal to dumps() of the dict (test_payload_is_the_documented_...).
    items: list[Any] = [
        "v", head.v,
        "alg", alg,
        "log", log_id,
        "seq", head.seq,
        "hash", head.hash,
        "key_id", key_id,
        "parent", head.parent.to_map() if head.parent is not None else None,
        "purpose", HEAD_PURPOSE,
        "session", head.session,
        "meta_digest", _meta_digest(head.meta),
    ]
    if head.extra.get(COMPACTED_FIELD) is not None:
        # A writer settling a lost reply after a compaction acknowledges what the mark
        # names: unsigned, an edited mark (or creation, which says whether the mark is
        # of the writer's session) had it acknowledge entries never stored, or store
        # again entries the compaction kept.
        items += ["compacted_digest", compacted_digest(head)]
    if head.append_keys:
        # The window answers retries with stored entries: unsigned, a forged item made a
        # new append be answered with an earlier entry of equal content, not stored.
        items += ["append_keys_digest", append_keys_digest(head)]
    body = dumps(items)
    # An array of 20 or 22 items has the one-byte header 0x94 or 0x96, one of 24 the
    # two bytes 0x98 0x18; a map of 10 to 12 pairs has the one byte 0xaa to 0xac.
    return bytes((0xA0 + len(items) // 2,)) + body[1 if len(items) < 24 else 2:]


def append_keys_digest(head: Head) -> bytes:
    """SHA-256 of the deterministic CBOR encoding of ``head``'s ``append_keys`` array
    (signed with the head when it is not empty; docs/format.md, "Signed heads")."""
    return hashlib.sha256(dumps([a.to_list() for a in head.append_keys])).digest()


def compacted_digest(head: Head) -> bytes:
    """SHA-256 of the deterministic CBOR encoding of ``[compacted, created_at, creator]``
    of ``head`` (``creator`` null unless text): signed with the head when it has a
    ``compacted`` mark (docs/format.md, "Signed heads")."""
    return hashlib.sha256(dumps([head.extra.get(COMPACTED_FIELD), head.created_at, head.creator])).digest()


def _need_log_id(log_id: str | None) -> str:
    if log_id is None:
        raise InvalidArgumentError("log_id", "signing and verifying heads need the log's identity: this store "
                                   "names no bucket, so pass LogConfig(log_id=...)")
    return log_id


def sign_head(signer: Signer | None, head: Head, log_id: str | None) -> Head:
    """``head`` with its signature by ``signer`` for the log ``log_id``; with no signer,
    ``head`` without any. Signs here, blocking: the protocol yields the signing to its
    driver instead (:func:`signed_head`).

    A head built from a stored one carries the stored signature along (``replace``);
    it is always replaced or dropped here, never left to vouch for different content.
    """
    if signer is None:
        return head if head.sig is None else replace(head, sig=None)
    return _with_signature(signer, head, signer.sign(_payload_to_sign(signer, head, log_id)))


def signed_head(signer: Signer | None, head: Head, log_id: str | None) -> Proc[Head]:
    """:func:`sign_head` as a procedure: the signature is an :class:`~s3log._protocol.ops.Sign` op the
    driver performs (off the event loop for a KMS key, in an async driver)."""
    if signer is None:
        return head if head.sig is None else replace(head, sig=None)
    sig = yield from ops.sign(signer, _payload_to_sign(signer, head, log_id))
    return _with_signature(signer, head, sig)


def _payload_to_sign(signer: Signer, head: Head, log_id: str | None) -> bytes:
    return head_payload(head, signer.alg, signer.key_id, _need_log_id(log_id))


def _with_signature(signer: Signer, head: Head, sig: Signature) -> Head:
    alg, key_id = signer.alg, signer.key_id
    if sig.alg != alg or sig.key_id != key_id:
        raise SigningError(f"signer {key_id} ({alg}) returned a signature for {sig.key_id} ({sig.alg})")
    return replace(head, sig=sig)


def verify_head(verifier: Verifier | None, head: Head, key: str, log_id: str | None) -> None:
    """Raise :class:`SignatureError` unless ``head`` is validly signed, as a head of the
    log ``log_id``, by a key ``verifier`` trusts. Verifies here, blocking: the protocol
    yields the check to its driver instead (:func:`verified_head`).

    With no verifier nothing is checked. ``key`` is the head's object key (for the error).
    """
    if verifier is None:
        return
    payload, sig = _payload_to_verify(verifier, head, key, log_id)
    try:
        verifier.verify(payload, sig)
    except SignatureRejected as exc:
        raise _rejected(head, key, sig, log_id, exc) from None


def verified_head(verifier: Verifier | None, head: Head, key: str, log_id: str | None) -> Proc[None]:
    """:func:`verify_head` as a procedure: the check is an :class:`~s3log._protocol.ops.Verify` op the
    driver performs (off the event loop for a KMS key, in an async driver)."""
    if verifier is None:
        return
    payload, sig = _payload_to_verify(verifier, head, key, log_id)
    try:
        yield from ops.verify(verifier, payload, sig)
    except SignatureRejected as exc:
        raise _rejected(head, key, sig, log_id, exc) from None


def _payload_to_verify(verifier: Verifier, head: Head, key: str, log_id: str | None) -> tuple[bytes, Signature]:
    sig = head.sig
    if sig is None:
        raise SignatureError(key, head.session, None,
                             f"the head is unsigned; this reader trusts {_trusted(verifier)}", seq=head.seq)
    return head_payload(head, sig.alg, sig.key_id, _need_log_id(log_id)), sig


def _rejected(head: Head, key: str, sig: Signature, log_id: str | None, exc: SignatureRejected) -> SignatureError:
    # The usual cause besides tampering: a head copied here from another log (or a
    # copy of a whole log read without naming its identity).
    return SignatureError(key, head.session, sig.key_id, f"{exc.reason} (checked as a head of log {log_id!r})",
                          seq=head.seq)


def _trusted(verifier: Verifier) -> str:
    ids = verifier.key_ids
    return "key " + ids[0] if len(ids) == 1 else "keys " + ", ".join(ids)
