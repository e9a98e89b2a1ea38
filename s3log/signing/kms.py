"""AWS KMS asymmetric keys: :class:`KmsSigner` (``kms:Sign``) and :class:`KmsVerifier`
(``kms:Verify``, ``MessageType=RAW``).

Each key is described once (``kms:DescribeKey``) and named by its ARN; each signature
or check is one blocking HTTPS call, which an async log makes in a thread. Its own
room: the one part of signing that calls a service, through a boto3 client it is given.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from s3log._format.cbor import dumps
from s3log._format.values import Signature
from s3log.errors import InvalidArgumentError
from s3log.signing.keys import ECDSA_SHA_256, RSASSA_PSS_SHA_256, SignatureRejected, SigningError, _unknown

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
