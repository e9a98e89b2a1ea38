"""Signed heads and signed checkpoints: anchoring a session's chain outside the bucket.

The hash chain proves that a session's entries were not changed *relative to its
head*; whoever can write the bucket can still change an entry, recompute every hash
and write a new head. A :class:`Signer` configured on the log (``LogConfig(signer=...)``)
signs every head it writes; a reader configured with a :class:`Verifier`
(``LogConfig(verifier=...)``) refuses a head that is unsigned, signed by a key it does
not trust, or whose signature does not match, with a :class:`SignatureError` naming
the session and the key. The signed payload is specified byte for byte in
docs/format.md ("Signed heads"); :func:`head_payload` builds it. It names the log the
head belongs to (its identity, ``<bucket>/<prefix>`` unless ``LogConfig(log_id=...)``
names it: :func:`default_log_id`), so a genuinely signed head copied to another
prefix or bucket does not verify there.

Keys: Ed25519 (:class:`Ed25519Signer`, verified by :class:`PublicKeyVerifier`) through
the ``cryptography`` package, and AWS KMS asymmetric keys (:class:`KmsSigner`,
:class:`KmsVerifier`, ``kms:Sign`` / ``kms:Verify`` with ``MessageType=RAW``). Every
signature carries its key id, so keys rotate: a verifier trusting the old and the new
key (:class:`AnyVerifier` combines verifiers of different kinds) reads both.
:class:`PublicKeyVerifier` and :class:`AnyVerifier` pickle (as public keys and key
ids), so they travel to other processes (Dask workers); :class:`KmsVerifier`, which
holds a boto3 client, refuses to.

A signature shows who wrote a head, not that history was not rewritten by the key's
holder, nor that an older signed head was not put back. :class:`Checkpointer` writes
signed ``(log, session, seq, hash)`` checkpoints to another store (a bucket that may have
Object Lock) and :func:`check_checkpoints` compares sessions with them; see
docs/operations.md ("Signed heads and checkpoints") for what each mode protects against.

The protocol's procedures do not sign or verify themselves: they yield a
:class:`~s3log._protocol.ops.Sign` or :class:`~s3log._protocol.ops.Verify` op that the driver performs. Ed25519
is pure CPU (tens of microseconds) and runs inline; the KMS classes make one blocking
HTTPS call per signature, which an async driver makes in a thread, off its event loop
(docs/decisions/0044-signing-is-an-op-the-drivers-perform.md).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from s3log._extras import require
from s3log._format.cbor import dumps, loads
from s3log._format.values import COMPACTED_FIELD, HASH_LEN, Head, Signature
from s3log._protocol import ops
from s3log.errors import CorruptionError, InvalidArgumentError, PreconditionFailed, S3LogError, SessionNotFound

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

    from s3log._protocol.ops import Proc
    from s3log.store.base import ObjectStore

    PublicKey = Ed25519PublicKey | EllipticCurvePublicKey | RSAPublicKey

__all__ = [
    "ECDSA_SHA_256", "ED25519", "RSASSA_PSS_SHA_256", "AnyVerifier", "Checkpoint", "CheckpointError",
    "CheckpointReport", "Checkpointer", "Ed25519Signer", "KmsSigner", "KmsVerifier", "PublicKeyVerifier",
    "Signature", "SignatureError", "SignatureRejected", "Signer", "SigningError", "Verifier", "check_checkpoints",
    "append_keys_digest", "check_log_id", "compacted_digest", "default_log_id", "head_payload", "key_id_for",
    "sign_head", "signed_head", "verified_head", "verify_head",
]

#: Ed25519 (RFC 8032) over the payload bytes.
ED25519 = "Ed25519"
#: ECDSA on P-256 with SHA-256 over the payload bytes; the value is DER (as KMS returns it).
ECDSA_SHA_256 = "ECDSA_SHA_256"
#: RSASSA-PSS, SHA-256 digest and MGF1-SHA-256, 32-byte salt (KMS's RSASSA_PSS_SHA_256).
RSASSA_PSS_SHA_256 = "RSASSA_PSS_SHA_256"

#: Tells a head's signed payload from a checkpoint's: a signature made for one
#: can never be passed off as the other, even under the same key.
HEAD_PURPOSE = "s3log/head"
CHECKPOINT_PURPOSE = "s3log/checkpoint"
#: The version a checkpoint (and its signed payload) carries: its own, not the segment
#: format's. Version 3 names the log the checkpoint belongs to; versions 1 and 2 (no
#: release wrote them) named none, so one could be passed off as another log's
#: checkpoint of a session of the same id: they are refused, not read.
CHECKPOINT_VERSION = 3
CHECKPOINT_VERSIONS = (3,)
#: The longest log identity accepted (in UTF-8 bytes); a bucket name and a prefix fit.
MAX_LOG_ID_BYTES = 1024


# ------------------------------------------------------------------------------ errors


class SignatureError(CorruptionError):
    """A head (or checkpoint) is unsigned, signed by an untrusted key, or badly signed.

    ``session`` and ``key_id`` (None for an unsigned object) say which; ``key`` is the
    object at fault.
    """

    def __init__(self, key: str, session: str, key_id: str | None, reason: str, *, seq: int | None = None) -> None:
        self.session = session
        self.key_id = key_id
        by = f"key {key_id}" if key_id is not None else "no key"
        super().__init__(key, f"signature of session {session} ({by}) does not verify: {reason}", seq=seq)


class CheckpointError(CorruptionError):
    """A session no longer holds what a signed checkpoint recorded (rewritten, cut, or deleted)."""

    def __init__(self, key: str, session: str, reason: str, *, seq: int | None = None) -> None:
        self.session = session
        super().__init__(key, f"session {session} does not match its checkpoint: {reason}", seq=seq)


class SigningError(S3LogError):
    """A signature could not be made (the signing service failed or refused); nothing was written."""


class SignatureRejected(S3LogError):
    """Raised by :meth:`Verifier.verify`: the signature is not valid (``reason`` says why).

    The protocol turns it into a :class:`SignatureError` naming the session and the key.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


# --------------------------------------------------------------------------- interfaces


@runtime_checkable
class Signer(Protocol):
    """Signs payloads with one key: ``alg`` and ``key_id`` go into the payload it signs.

    An optional ``blocking`` attribute says whether :meth:`sign` may block (a network
    call): an async log runs such a signer in a thread, off its event loop, and a
    non-blocking one (``blocking = False``: local CPU work) inline. A signer without the
    attribute is taken to block.
    """

    @property
    def alg(self) -> str:
        """The signature scheme (:data:`ED25519`, :data:`ECDSA_SHA_256`, :data:`RSASSA_PSS_SHA_256`)."""
        ...

    @property
    def key_id(self) -> str:
        """The id recorded with every signature, by which verifiers find the key."""
        ...

    def sign(self, payload: bytes) -> Signature:
        """The signature of ``payload``; raises :class:`SigningError` when it cannot be made."""
        ...


@runtime_checkable
class Verifier(Protocol):
    """Checks signatures made by the keys it trusts.

    ``blocking``, optional, as for :class:`Signer`: a verifier without it is taken to block.
    """

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of the trusted keys (named in errors)."""
        ...

    def verify(self, payload: bytes, sig: Signature) -> None:
        """Return if ``sig`` is a valid signature of ``payload`` by a trusted key, else raise
        :class:`SignatureRejected`."""
        ...


# ------------------------------------------------------------------------------ payload


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


def _unknown(key_id: str, trusted: Sequence[str]) -> SignatureRejected:
    return SignatureRejected(f"signed by unknown key {key_id}; trusted: {', '.join(trusted) or 'none'}")


# ------------------------------------------------------------------------------ Ed25519


def key_id_for(public_key: PublicKey) -> str:
    """The default key id of a public key: a fingerprint anyone holding the key can recompute.

    ``ed25519:`` + the first 16 bytes (hex) of SHA-256 of the raw 32-byte key for
    Ed25519; ``spki:`` + the same of the DER SubjectPublicKeyInfo for other keys.
    """
    _require_crypto()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if isinstance(public_key, Ed25519PublicKey):
        raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return "ed25519:" + hashlib.sha256(raw).hexdigest()[:32]
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "spki:" + hashlib.sha256(der).hexdigest()[:32]


def _read_pem(source: bytes | str | Path) -> bytes:
    if isinstance(source, bytes):
        return source
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise InvalidArgumentError("key file", f"cannot read {source}: {exc.strerror or exc}") from None


class Ed25519Signer:
    """Signs with an Ed25519 private key held in this process (pure CPU, no I/O)."""

    alg = ED25519
    #: Local CPU work (tens of microseconds): an async log signs inline.
    blocking = False

    def __init__(self, private_key: Ed25519PrivateKey, *, key_id: str | None = None) -> None:
        _require_crypto()
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        if not isinstance(private_key, Ed25519PrivateKey):
            raise InvalidArgumentError("private_key", f"must be an Ed25519PrivateKey, not {type(private_key).__name__}")
        self._key = private_key
        self._key_id = key_id if key_id is not None else key_id_for(private_key.public_key())

    @property
    def key_id(self) -> str:
        """The id recorded with each signature (the public key's fingerprint unless given)."""
        return self._key_id

    @classmethod
    def from_pem(cls, source: bytes | str | Path, *, password: bytes | None = None,
                 key_id: str | None = None) -> Ed25519Signer:
        """A signer from a PEM (PKCS#8) private key: the bytes, or a file path."""
        _require_crypto()
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        try:
            key = serialization.load_pem_private_key(_read_pem(source), password=password)
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError("private key", f"not a PEM private key: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise InvalidArgumentError("private key", f"must be an Ed25519 key, not {type(key).__name__}")
        return cls(key, key_id=key_id)

    @property
    def public_key(self) -> Ed25519PublicKey:
        """The public key readers verify with."""
        return self._key.public_key()

    def sign(self, payload: bytes) -> Signature:
        """Ed25519 signature of ``payload``."""
        return Signature(ED25519, self._key_id, self._key.sign(payload))


class PublicKeyVerifier:
    """Verifies locally with public keys: Ed25519, EC P-256 (ECDSA_SHA_256) or RSA (PSS).

    ``keys``: public keys (each known by :func:`key_id_for`), or a mapping from key id
    to public key (for instance a KMS key's ARN to the public key exported with
    ``GetPublicKey``: KMS signatures then verify with no call to KMS).
    """

    #: Local CPU work: an async log verifies inline.
    blocking = False

    def __init__(self, keys: Mapping[str, PublicKey] | Iterable[PublicKey]) -> None:
        _require_crypto()
        from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

        pairs = list(keys.items()) if isinstance(keys, Mapping) else [(key_id_for(k), k) for k in keys]
        self._keys: dict[str, tuple[str, Any]] = {}
        for key_id, key in pairs:
            if isinstance(key, Ed25519PublicKey):
                alg = ED25519
            elif isinstance(key, EllipticCurvePublicKey) and key.curve.name == "secp256r1":
                alg = ECDSA_SHA_256
            elif isinstance(key, RSAPublicKey):
                alg = RSASSA_PSS_SHA_256
            else:
                raise InvalidArgumentError("keys", f"key {key_id}: unsupported public key type {type(key).__name__}")
            self._keys[key_id] = (alg, key)
        if not self._keys:
            raise InvalidArgumentError("keys", "no public key given")

    @classmethod
    def from_pem(cls, *sources: bytes | str | Path | tuple[str, bytes | str | Path]) -> PublicKeyVerifier:
        """A verifier from PEM public keys: bytes or file paths, or ``(key_id, bytes or path)`` pairs."""
        _require_crypto()
        from cryptography.hazmat.primitives import serialization

        keys: dict[str, Any] = {}
        for src in sources:
            key_id, pem = src if isinstance(src, tuple) else (None, src)
            try:
                key = serialization.load_pem_public_key(_read_pem(pem))
            except (ValueError, TypeError) as exc:
                raise InvalidArgumentError("public key", f"{pem if isinstance(pem, (str, Path)) else 'PEM'} "
                                           f"is not a PEM public key: {exc}") from None
            checked = _verifiable(key, "public key")
            keys[key_id or key_id_for(checked)] = checked
        return cls(keys)

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of the trusted keys."""
        return tuple(self._keys)

    def __reduce__(self) -> tuple[Any, tuple[tuple[tuple[str, bytes], ...]]]:
        """Pickles as its key ids and public keys (DER SubjectPublicKeyInfo bytes).

        ``cryptography``'s key objects do not pickle; this lets a verifier travel to
        other processes (Dask workers: :func:`s3log.analytics.dask.read_entries`), where the same
        keys under the same ids are loaded again. Nothing secret is in it.
        """
        from cryptography.hazmat.primitives import serialization

        der = serialization.Encoding.DER
        spki = serialization.PublicFormat.SubjectPublicKeyInfo
        keys = tuple((kid, key.public_bytes(der, spki)) for kid, (_, key) in self._keys.items())
        return _public_key_verifier, (keys,)

    def verify(self, payload: bytes, sig: Signature) -> None:
        """Check ``sig`` over ``payload`` with the public key ``sig.key_id`` names."""
        _require_crypto()
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding

        found = self._keys.get(sig.key_id)
        if found is None:
            raise _unknown(sig.key_id, self.key_ids)
        alg, key = found
        if sig.alg != alg:
            raise SignatureRejected(f"the signature says {sig.alg}, but key {sig.key_id} is for {alg}")
        try:
            if alg == ED25519:
                key.verify(sig.value, payload)
            elif alg == ECDSA_SHA_256:
                key.verify(sig.value, payload, ec.ECDSA(hashes.SHA256()))
            else:
                # KMS uses a 32-byte salt; the salt length is read from the signature
                # (AUTO) so that signatures with another salt length, moto's, verify too.
                key.verify(sig.value, payload, padding.PSS(padding.MGF1(hashes.SHA256()), padding.PSS.AUTO),
                           hashes.SHA256())
        except InvalidSignature:
            raise SignatureRejected("bad signature (the signed content was changed, or another key signed it)") \
                from None


def _public_key_verifier(keys: tuple[tuple[str, bytes], ...]) -> PublicKeyVerifier:
    """A :class:`PublicKeyVerifier` from ``(key id, DER public key)`` pairs (how one unpickles)."""
    _require_crypto()
    from cryptography.hazmat.primitives import serialization

    return PublicKeyVerifier({kid: _verifiable(serialization.load_der_public_key(der), f"key {kid}")
                              for kid, der in keys})


def _verifiable(key: object, name: str) -> PublicKey:
    """``key`` when :class:`PublicKeyVerifier` can verify with it (Ed25519, ECDSA P-256,
    RSA), else an InvalidArgumentError naming ``name``."""
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

    if isinstance(key, Ed25519PublicKey | RSAPublicKey):
        return key
    if isinstance(key, EllipticCurvePublicKey) and key.curve.name == "secp256r1":
        return key
    raise InvalidArgumentError(name, f"unsupported public key type {type(key).__name__}")


# ---------------------------------------------------------------------------------- KMS

#: The scheme used for each KMS key spec s3log signs with.
_KMS_ALG = {"ECC_NIST_P256": ECDSA_SHA_256, "RSA_2048": RSASSA_PSS_SHA_256, "RSA_3072": RSASSA_PSS_SHA_256,
            "RSA_4096": RSASSA_PSS_SHA_256}


def _client_error(exc: BaseException) -> tuple[str, str]:
    """(code, message) of a botocore error (any other exception: its type and text)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        err = response.get("Error", {})
        return str(err.get("Code", type(exc).__name__)), str(err.get("Message", exc))
    return type(exc).__name__, str(exc)


def _describe_kms_key(client: Any, key_id: str) -> dict[str, Any]:
    if not isinstance(key_id, str) or not key_id:
        raise InvalidArgumentError("kms key id", f"must be a non-empty string, not {key_id!r}")
    try:
        meta: dict[str, Any] = client.describe_key(KeyId=key_id)["KeyMetadata"]
    except Exception as exc:  # botocore raises ClientError and connection errors alike
        code, message = _client_error(exc)
        raise InvalidArgumentError("kms key id", f"cannot use KMS key {key_id}: {code}: {message}") from None
    if meta.get("KeyUsage") != "SIGN_VERIFY":
        raise InvalidArgumentError("kms key id", f"KMS key {key_id} has usage {meta.get('KeyUsage')}, not SIGN_VERIFY")
    if meta.get("KeySpec") not in _KMS_ALG:
        raise InvalidArgumentError("kms key id", f"KMS key {key_id} has key spec {meta.get('KeySpec')}; "
                                   f"s3log signs with {', '.join(_KMS_ALG)}")
    return meta


class KmsSigner:
    """Signs with an AWS KMS asymmetric key (``kms:Sign``, ``MessageType=RAW``).

    ``client`` is a boto3 KMS client; ``key_id`` a key id, ARN or alias. The key is
    described once here (``kms:DescribeKey``): heads record its ARN, and the scheme
    follows the key spec (ECC_NIST_P256: ECDSA_SHA_256; RSA: RSASSA_PSS_SHA_256).
    Each signature is one blocking call to KMS, made while the commit is planned,
    before anything is written; an async log makes it in a thread.
    """

    #: Each signature is an HTTPS call: an async log makes it off its event loop.
    blocking = True

    def __init__(self, client: Any, key_id: str) -> None:
        meta = _describe_kms_key(client, key_id)
        self._client = client
        self._arn = str(meta["Arn"])
        self._alg = _KMS_ALG[meta["KeySpec"]]

    @property
    def alg(self) -> str:
        """The KMS signing algorithm used."""
        return self._alg

    @property
    def key_id(self) -> str:
        """The key's ARN."""
        return self._arn

    def sign(self, payload: bytes) -> Signature:
        """``kms:Sign`` over ``payload``; :class:`SigningError` if KMS fails."""
        try:
            out = self._client.sign(KeyId=self._arn, Message=payload, MessageType="RAW", SigningAlgorithm=self._alg)
        except Exception as exc:  # botocore ClientError, connection errors: nothing is written
            code, message = _client_error(exc)
            raise SigningError(f"KMS could not sign with key {self._arn}: {code}: {message}") from exc
        return Signature(self._alg, self._arn, bytes(out["Signature"]))


class KmsVerifier:
    """Verifies with AWS KMS (``kms:Verify``) signatures by the given keys.

    Each key (id, ARN or alias) is described once here; heads name keys by ARN. A
    signature found valid is remembered (up to ``cache_size``), so reading the same
    head again makes no call.
    """

    #: A check may be an HTTPS call: an async log makes it off its event loop.
    blocking = True

    def __init__(self, client: Any, key_ids: str | Iterable[str], *, cache_size: int = 4096) -> None:
        ids = [key_ids] if isinstance(key_ids, str) else list(key_ids)
        if not ids:
            raise InvalidArgumentError("key_ids", "no KMS key given")
        self._client = client
        self._algs = {str(m["Arn"]): _KMS_ALG[m["KeySpec"]] for m in (_describe_kms_key(client, k) for k in ids)}
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ARNs of the trusted keys."""
        return tuple(self._algs)

    def __reduce__(self) -> tuple[Any, ...]:
        """Refused: a KMS verifier does not pickle (``TypeError``).

        It verifies through the boto3 client it was given, whose credentials and
        settings cannot be carried to another process; a client rebuilt there would
        verify with whatever credentials and endpoint that process finds. To verify KMS
        signatures elsewhere (Dask workers), export each key's public key
        (``kms:GetPublicKey``) and pass ``PublicKeyVerifier({arn: public_key})``, which
        verifies them offline and pickles.
        """
        raise TypeError("a KmsVerifier does not pickle (it holds a boto3 client): verify KMS signatures in "
                        "another process with PublicKeyVerifier({arn: public_key}) and the keys' public keys "
                        "(kms:GetPublicKey)")

    def __copy__(self) -> KmsVerifier:
        """Itself: a verifier does not change, and copying (``copy``, a config's
        ``deepcopy``) must not meet the pickling refusal above."""
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> KmsVerifier:
        """Itself (see :meth:`__copy__`)."""
        return self

    def verify(self, payload: bytes, sig: Signature) -> None:
        """``kms:Verify`` of ``sig`` over ``payload`` (unless found valid before)."""
        alg = self._algs.get(sig.key_id)
        if alg is None:
            raise _unknown(sig.key_id, self.key_ids)
        if sig.alg != alg:
            raise SignatureRejected(f"the signature says {sig.alg}, but key {sig.key_id} signs with {alg}")
        memo = hashlib.sha256(dumps([sig.key_id, sig.alg, sig.value, payload])).digest()
        with self._lock:
            if memo in self._cache:
                self._cache.move_to_end(memo)
                return
        try:
            out = self._client.verify(KeyId=sig.key_id, Message=payload, MessageType="RAW", Signature=sig.value,
                                      SigningAlgorithm=alg)
            valid = bool(out.get("SignatureValid"))
        except Exception as exc:  # KMS says "invalid" by raising; any other failure is no proof either
            code, message = _client_error(exc)
            if code != "KMSInvalidSignatureException":
                raise SignatureRejected(f"KMS could not verify it: {code}: {message}") from None
            valid = False
        if not valid:
            raise SignatureRejected("bad signature (KMS Verify: the signed content was changed, or another key "
                                    "signed it)")
        with self._lock:
            self._cache[memo] = None
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)


class AnyVerifier:
    """Trusts the keys of several verifiers (for rotation across kinds: Ed25519 and KMS)."""

    def __init__(self, *verifiers: Verifier) -> None:
        if not verifiers:
            raise InvalidArgumentError("verifiers", "no verifier given")
        self._verifiers = verifiers
        self._by_id: dict[str, Verifier] = {}
        for v in verifiers:
            for key_id in v.key_ids:
                self._by_id.setdefault(key_id, v)

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every trusted key id."""
        return tuple(self._by_id)

    @property
    def blocking(self) -> bool:
        """Whether any of the verifiers may block (see :class:`Verifier`)."""
        return any(getattr(v, "blocking", True) for v in self._verifiers)

    def __reduce__(self) -> tuple[Any, tuple[Verifier, ...]]:
        """Pickles as the verifiers it combines, in order (so it pickles if each of them does)."""
        return AnyVerifier, self._verifiers

    def verify(self, payload: bytes, sig: Signature) -> None:
        """Verify with the verifier that trusts ``sig.key_id``."""
        v = self._by_id.get(sig.key_id)
        if v is None:
            raise _unknown(sig.key_id, self.key_ids)
        v.verify(payload, sig)


# -------------------------------------------------------------------------- checkpoints


def checkpoint_payload(log_id: str, session: str, seq: int, hash_: bytes, at: int, alg: str, key_id: str,
                       v: int = CHECKPOINT_VERSION) -> bytes:
    """The bytes a checkpoint's signature covers (docs/format.md, "Signed checkpoints")."""
    return dumps({"purpose": CHECKPOINT_PURPOSE, "v": v, "log": log_id, "session": session, "seq": seq,
                  "hash": hash_, "at": at, "alg": alg, "key_id": key_id})


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A signed statement that ``session`` of the log ``log`` held entry ``seq`` with hash
    ``hash`` at time ``at`` (ms)."""

    log: str
    session: str
    seq: int
    hash: bytes
    at: int
    sig: Signature
    #: The checkpoint's version (:data:`CHECKPOINT_VERSION`); its payload carries the same.
    v: int = CHECKPOINT_VERSION

    def encode(self) -> bytes:
        """The stored object."""
        return dumps({"v": self.v, "log": self.log, "session": self.session, "seq": self.seq, "hash": self.hash,
                      "at": self.at, "sig": self.sig.to_map()})

    @staticmethod
    def decode(body: bytes, key: str) -> Checkpoint:
        """Decode (shape only; :func:`check_checkpoints` verifies the signature)."""
        try:
            obj = loads(body)
        except Exception as exc:  # cbor2 raises several types for garbage input
            raise CorruptionError(key, f"checkpoint is not valid CBOR: {exc}") from None
        if not isinstance(obj, dict):
            raise CorruptionError(key, "checkpoint is not a map")
        v = obj.get("v")
        if v in (1, 2) and type(v) is int:
            raise CorruptionError(key, f"checkpoint version {v} names no log (a checkpoint of a session of the "
                                       f"same id in another log could pass for it); this build reads version "
                                       f"{CHECKPOINT_VERSION} only: checkpoint the sessions again")
        if type(v) is not int or v not in CHECKPOINT_VERSIONS:
            raise CorruptionError(key, f"checkpoint version {v!r} is not one this build reads "
                                       f"({', '.join(map(str, CHECKPOINT_VERSIONS))})")
        log, session, seq, h, at = obj.get("log"), obj.get("session"), obj.get("seq"), obj.get("hash"), obj.get("at")
        if not (isinstance(log, str) and isinstance(session, str) and type(seq) is int and seq >= 0
                and type(at) is int and isinstance(h, bytes) and len(h) == HASH_LEN):
            raise CorruptionError(key, "checkpoint must hold log, session, seq >= 0, a 32-byte hash and at")
        return Checkpoint(log, session, seq, h, at, Signature.from_map(obj.get("sig"), key), v)

    def payload(self, log_id: str | None = None) -> bytes:
        """What :attr:`sig` signs, as a checkpoint of the log ``log_id`` (its own :attr:`log` by default)."""
        return checkpoint_payload(self.log if log_id is None else log_id, self.session, self.seq, self.hash,
                                  self.at, self.sig.alg, self.sig.key_id, self.v)


def _checkpoint_dir(prefix: str, session: str) -> str:
    return f"{prefix.strip('/')}/{session}/" if prefix.strip("/") else f"{session}/"


def checkpoint_key(prefix: str, session: str, seq: int) -> str:
    """``{prefix}/{session}/{seq:012d}``: one create-only object per checkpointed seq."""
    return f"{_checkpoint_dir(prefix, session)}{seq:012d}"


class Checkpointer:
    """Writes signed checkpoints of sessions to another store (run it periodically).

    ``store`` should be another bucket, or at least a prefix the log's writers cannot
    write; with S3 Object Lock (compliance mode) on that bucket, not even the holder of
    the signing key can take a checkpoint back. Checkpoints are create-only objects:
    one per (session, seq), never overwritten.
    """

    def __init__(self, store: ObjectStore, signer: Signer, *, prefix: str = "s3log-checkpoints") -> None:
        self.store = store
        self.signer = signer
        self.prefix = prefix

    def checkpoint(self, log: Any, session_ids: Iterable[str] | None = None, *, now_ms: int | None = None
                   ) -> list[Checkpoint]:
        """Read and verify each session (every session of ``log`` by default) and checkpoint its head.

        A session already checkpointed at its current seq, or empty, is skipped.
        Returns the checkpoints written.
        """
        import time

        log_id = _log_id_of(log)
        ids = list(session_ids) if session_ids is not None else log.list_session_ids()
        at = now_ms if now_ms is not None else int(time.time() * 1000)
        out: list[Checkpoint] = []
        for sid in ids:
            view = log.read(sid)  # the whole chain verified (and the head's signature, if the log checks them)
            head = view.head
            if head.seq < 0 or head.hash is None:
                continue
            key = checkpoint_key(self.prefix, sid, head.seq)
            alg, key_id = self.signer.alg, self.signer.key_id
            sig = self.signer.sign(checkpoint_payload(log_id, sid, head.seq, head.hash, at, alg, key_id))
            cp = Checkpoint(log_id, sid, head.seq, head.hash, at, sig)
            try:
                self.store.put_if_absent(key, cp.encode())
            except PreconditionFailed:
                continue  # checkpointed at this seq already: the older statement stands
            out.append(cp)
        return out


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    """What :func:`check_checkpoints` compared: sessions and checkpoints that held."""

    sessions: int
    checkpoints: int


def check_checkpoints(
    log: Any, store: ObjectStore, verifier: Verifier, *, prefix: str = "s3log-checkpoints",
    session_ids: Iterable[str] | None = None,
) -> CheckpointReport:
    """Check sessions against their signed checkpoints.

    Every checkpoint of each session (every checkpointed session by default) must be
    signed by a key ``verifier`` trusts as a checkpoint of this log (its identity,
    ``log.log_id``; else :class:`SignatureError`), and the
    session, read and verified through ``log``, must still hold an entry at the
    checkpoint's seq with the checkpoint's hash (else :class:`CheckpointError`: the
    session was rewritten, cut back, or deleted after it was checkpointed).
    """
    log_id = _log_id_of(log)
    if session_ids is None:
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        ids = sorted(_list_prefixes(store, base))
    else:
        ids = list(session_ids)
    count = 0
    for sid in ids:
        keys = [o.key for o in _list_objects(store, _checkpoint_dir(prefix, sid))]
        if not keys:
            continue
        cps = []
        for key in keys:
            cp = Checkpoint.decode(store.get(key).body, key)
            if cp.session != sid or key != checkpoint_key(prefix, sid, cp.seq):
                raise CorruptionError(key, f"checkpoint names session {cp.session} seq {cp.seq}")
            if cp.log != log_id:
                raise SignatureError(key, sid, cp.sig.key_id, f"it checkpoints log {cp.log!r}, not this log "
                                     f"{log_id!r} (give each log a checkpoint prefix of its own)", seq=cp.seq)
            try:
                verifier.verify(cp.payload(log_id), cp.sig)
            except SignatureRejected as exc:
                raise SignatureError(key, sid, cp.sig.key_id, exc.reason, seq=cp.seq) from None
            cps.append((key, cp))
        head_key = log.layout.head(sid)
        try:
            view = log.read(sid)
        except SessionNotFound:
            raise CheckpointError(head_key, sid, f"the session is gone, but {keys[-1]} checkpointed it") from None
        for key, cp in cps:
            if view.head.seq < cp.seq:
                raise CheckpointError(head_key, sid, f"it ends at seq {view.head.seq}, but {key} saw seq {cp.seq}",
                                      seq=cp.seq)
            found = view.entries[cp.seq].hash
            if found != cp.hash:
                raise CheckpointError(head_key, sid, f"entry {cp.seq} has hash {found.hex()}, but {key} "
                                      f"recorded {cp.hash.hex()}", seq=cp.seq)
            count += 1
    return CheckpointReport(len(ids), count)


def _log_id_of(log: Any) -> str:
    log_id = getattr(log, "log_id", None)
    if log_id is None:
        raise InvalidArgumentError("log_id", "checkpoints name the log they belong to, and this log's store names "
                                   "no bucket: pass LogConfig(log_id=...)")
    return check_log_id(log_id)


def _list_objects(store: ObjectStore, prefix: str) -> list[Any]:
    out: list[Any] = []
    token: str | None = None
    while True:
        page = store.list(prefix, token=token)
        out.extend(page.objects)
        token = page.next_token
        if token is None:
            return out


def _list_prefixes(store: ObjectStore, prefix: str) -> list[str]:
    out: list[str] = []
    token: str | None = None
    while True:
        page = store.list(prefix, delimiter="/", token=token)
        out.extend(p[len(prefix):].rstrip("/") for p in page.prefixes)
        token = page.next_token
        if token is None:
            return out


def _require_crypto() -> None:
    # Ed25519 and local public-key verification need the `sign` extra (cryptography).
    require("cryptography", "sign")
