"""Key providers: what wraps and unwraps a session's data key.

:class:`LocalKeyProvider` wraps with AES-256-GCM under a key the application holds;
:class:`KmsKeyProvider` with an AWS KMS symmetric key (``kms:Encrypt`` /
``kms:Decrypt``, the data key's ref bound as encryption context). A provider is called
by the drivers (the ``Wrap`` and ``Unwrap`` ops, as signing keys are: decision 0044),
never inside the protocol; a KMS call is blocking, so an async log makes it in a thread.
Its own room: the one part of encryption that may call a service.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

from s3log.errors import EncryptionError, InvalidArgumentError


class KeyProvider(Protocol):
    """Wraps and unwraps data keys. ``blocking``: whether a call may wait on the network."""

    blocking: bool

    def wrap(self, ref: str, data_key: bytes) -> tuple[str, bytes]:
        """``(kek, wrapped)``: the wrapping key's id and the wrapped data key."""
        ...

    def unwrap(self, ref: str, kek: str, wrapped: bytes) -> bytes:
        """The data key; EncryptionError if this provider cannot unwrap it."""
        ...


class LocalKeyProvider:
    """Wraps data keys under 32-byte keys the application holds (AES-256-GCM).

    ``keys`` maps key ids to keys; ``current`` (the only id by default) wraps new data
    keys, and every id unwraps: rotating the wrapping key is adding one and making it
    current. Destroying a wrapping key makes every data key it wrapped unreadable.
    """

    blocking = False

    def __init__(self, keys: Mapping[str, bytes], current: str | None = None) -> None:
        if not isinstance(keys, Mapping):
            raise InvalidArgumentError("keys", f"must be a mapping of key ids to 32-byte keys, not {keys!r:.80}")
        if not keys:
            raise InvalidArgumentError("keys", "a LocalKeyProvider needs at least one key")
        for kid, key in keys.items():
            if not isinstance(kid, str) or not kid or not isinstance(key, bytes) or len(key) != 32:
                raise InvalidArgumentError("keys", f"key {kid!r} must be a non-empty id and 32 bytes")
        if current is None:
            if len(keys) != 1:
                raise InvalidArgumentError("current", "name the key that wraps new data keys")
            current = next(iter(keys))
        if current not in keys:
            raise InvalidArgumentError("current", f"{current!r} is not one of the keys")
        self._keys = dict(keys)
        self.current = current

    def wrap(self, ref: str, data_key: bytes) -> tuple[str, bytes]:
        """Wrap ``data_key`` under the current key, bound to ``ref``."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = os.urandom(12)
        return self.current, nonce + AESGCM(self._keys[self.current]).encrypt(nonce, data_key, ref.encode())

    def unwrap(self, ref: str, kek: str, wrapped: bytes) -> bytes:
        """Unwrap with key ``kek``; EncryptionError if it is not held or does not fit."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key = self._keys.get(kek)
        if key is None:
            raise EncryptionError(None, f"wrapping key {kek!r} is not held by this LocalKeyProvider", key_ref=ref)
        try:
            return AESGCM(key).decrypt(wrapped[:12], wrapped[12:], ref.encode())
        except InvalidTag:
            raise EncryptionError(None, f"wrapping key {kek!r} does not unwrap this data key (a wrong key)",
                                  key_ref=ref) from None


class KmsKeyProvider:
    """Wraps data keys with an AWS KMS symmetric key (``kms:Encrypt``/``kms:Decrypt``).

    ``client`` is a boto3 KMS client, ``key_id`` a key id, ARN or alias that wraps new
    data keys; data keys wrapped by other KMS keys unwrap too (KMS names the key in the
    ciphertext). The ref is bound as encryption context ``{"s3log:key": ref}``, so
    CloudTrail shows which session's key each call opened. Each call is one blocking
    request; an async log makes it in a thread.
    """

    blocking = True

    def __init__(self, client: Any, key_id: str) -> None:
        if not isinstance(key_id, str) or not key_id:
            raise InvalidArgumentError("kms key id", f"must be a non-empty string, not {key_id!r}")
        self._client = client
        self.key_id = key_id

    def wrap(self, ref: str, data_key: bytes) -> tuple[str, bytes]:
        """Encrypt ``data_key`` under :attr:`key_id`."""
        try:
            out = self._client.encrypt(KeyId=self.key_id, Plaintext=data_key,
                                       EncryptionContext={"s3log:key": ref})
        except Exception as exc:  # botocore's ClientError and connection errors alike
            raise EncryptionError(None, f"KMS key {self.key_id} cannot wrap a data key: {exc}", key_ref=ref) from None
        return str(out["KeyId"]), bytes(out["CiphertextBlob"])

    def unwrap(self, ref: str, kek: str, wrapped: bytes) -> bytes:
        """Decrypt a wrapped data key (KMS finds the key from the ciphertext)."""
        try:
            out = self._client.decrypt(CiphertextBlob=wrapped, EncryptionContext={"s3log:key": ref})
        except Exception as exc:  # botocore's ClientError and connection errors alike
            raise EncryptionError(None, f"KMS cannot unwrap this data key (wrapped by {kek}): {exc}",
                                  key_ref=ref) from None
        return bytes(out["Plaintext"])
