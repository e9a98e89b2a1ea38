"""What signs and verifies: the :class:`Signer` and :class:`Verifier` interfaces, the
errors of signing, and the keys held in this process.

Ed25519 (:class:`Ed25519Signer`) signs through the ``cryptography`` package;
:class:`PublicKeyVerifier` verifies Ed25519, ECDSA P-256 and RSA-PSS signatures with
public keys (a KMS key's exported one too), and pickles as its public keys;
:class:`AnyVerifier` trusts the keys of several verifiers (rotation across kinds).
Their own room: the keys, apart from what they sign (:mod:`s3log.signing.heads`,
:mod:`s3log.signing.checkpoints`) and from the KMS service (:mod:`s3log.signing.kms`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from s3log._extras import require
from s3log._format.values import Signature
from s3log.errors import CorruptionError, InvalidArgumentError, S3LogError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

    PublicKey = Ed25519PublicKey | EllipticCurvePublicKey | RSAPublicKey

#: Ed25519 (RFC 8032) over the payload bytes.
ED25519 = "Ed25519"
#: ECDSA on P-256 with SHA-256 over the payload bytes; the value is DER (as KMS returns it).
ECDSA_SHA_256 = "ECDSA_SHA_256"
#: RSASSA-PSS, SHA-256 digest and MGF1-SHA-256, 32-byte salt (KMS's RSASSA_PSS_SHA_256).
RSASSA_PSS_SHA_256 = "RSASSA_PSS_SHA_256"




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


class SigningError(S3LogError):
    """A signature could not be made (the signing service failed or refused); nothing was written."""


class SignatureRejected(S3LogError):
    """Raised by :meth:`Verifier.verify`: the signature is not valid (``reason`` says why).

    The protocol turns it into a :class:`SignatureError` naming the session and the key.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)




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


def _unknown(key_id: str, trusted: Sequence[str]) -> SignatureRejected:
    return SignatureRejected(f"signed by unknown key {key_id}; trusted: {', '.join(trusted) or 'none'}")




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


def _require_crypto() -> None:
    # Ed25519 and local public-key verification need the `sign` extra (cryptography).
    require("cryptography", "sign")
