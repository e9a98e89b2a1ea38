"""Confidential and erasable sessions: client-side envelope encryption of entry data.

``LogConfig(encryption=Encryption(provider))`` makes every session a log creates or
opens encrypt its entries' data with a data key of its own (AES-256-GCM), stored
wrapped by ``provider`` (:class:`LocalKeyProvider`, :class:`KmsKeyProvider`) in a key
object outside the session's prefix. Readers with the provider see plaintext; the
chain, listings, gc and signatures need no key. :meth:`s3log.Log.shred` destroys a
session's data keys: its data becomes unreadable everywhere, its chain still verifies.
See docs/operations.md ("Encrypted sessions") and decision 0049.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from s3log._extras import require
from s3log.encryption.envelope import ENVELOPE_TAG, DataKey
from s3log.encryption.providers import KeyProvider, KmsKeyProvider, LocalKeyProvider
from s3log.errors import EncryptionError, InvalidArgumentError, SessionShredded

__all__ = ["ENVELOPE_TAG", "DataKey", "Encryption", "EncryptionError", "KeyProvider", "KmsKeyProvider",
           "LocalKeyProvider", "SessionShredded"]


@dataclass(frozen=True, slots=True)
class Encryption:
    """How a log encrypts: the key ``provider`` and where data keys live.

    ``key_store``: the store holding key objects (``{prefix}/keys/{session}/{n}``); None
    keeps them in the log's own store. With S3 Object Lock on the log's bucket, give a
    store on a bucket without it (and without versioning, or with noncurrent versions
    expiring at once), or a shredded key would outlive :meth:`~s3log.Log.shred`. A
    blocking store for a :class:`~s3log.Log`, an async one for an
    :class:`~s3log.AsyncLog`.
    """

    provider: KeyProvider
    key_store: Any = None

    def __post_init__(self) -> None:
        require("cryptography.hazmat.primitives.ciphers.aead", "sign")  # AES-GCM: refused now, not at a commit
        for method in ("wrap", "unwrap"):
            if not callable(getattr(self.provider, method, None)):
                raise InvalidArgumentError("encryption", f"the key provider has no {method}() method")
