"""The encrypted form of entry data, and of a session's data key: pure functions.

An encrypted entry's ``data`` is a CBOR tag :data:`ENVELOPE_TAG` around
``[key_ref, nonce, ciphertext]``: AES-256-GCM of the deterministic CBOR encoding of
the data, under the data key ``key_ref`` names, with the entry's kind bound in as
associated data. The chain hashes the record holding this tag, so verifying, listing,
gc and signatures need no key. A data key is stored wrapped (encrypted by a key
provider) in a key object (:func:`key_object`); see docs/format.md, "Encrypted
sessions". Its own room: everything about the bytes, nothing about where they live.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import cbor2

from s3log._format.cbor import dumps, loads
from s3log._format.values import APPEND_DIGEST_LEN
from s3log.errors import CorruptionError, EncryptionError

#: The CBOR tag of an encrypted entry's data (first-come-first-served range, unassigned).
ENVELOPE_TAG = 21299
#: The one cipher of format 1: AES-256-GCM, 96-bit nonces, 128-bit tags.
ALGORITHM = "AES-256-GCM"
NONCE_LEN = 12
KEY_LEN = 32
_AAD = b"s3log/enc/1\x00"


class DataKey:
    """A session's data key, unwrapped: ``ref`` (``{session}/{n:06d}``) and its bytes."""

    __slots__ = ("_cipher", "key", "ref")

    def __init__(self, ref: str, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.ref = ref
        self.key = key
        self._cipher = AESGCM(key)  # made once: a commit seals with it every entry

    def __repr__(self) -> str:
        return f"DataKey({self.ref!r})"

    def seal(self, kind: str, plaintext: bytes, nonce: bytes) -> cbor2.CBORTag:
        """The envelope of ``plaintext`` (a data item's deterministic CBOR)."""
        ct = self._cipher.encrypt(nonce, plaintext, _aad(self.ref, kind))
        return cbor2.CBORTag(ENVELOPE_TAG, [self.ref, nonce, ct])

    def open(self, kind: str, nonce: bytes, ciphertext: bytes, session: str | None) -> Any:
        """The data an envelope sealed; EncryptionError if it does not authenticate."""
        from cryptography.exceptions import InvalidTag

        try:
            plain = self._cipher.decrypt(nonce, ciphertext, _aad(self.ref, kind))
        except InvalidTag:
            raise EncryptionError(session, "entry data does not authenticate under its data key "
                                  "(a wrong key, or changed ciphertext)", key_ref=self.ref) from None
        return loads(plain)

    def digest(self, kind: str, encoded: bytes) -> bytes:
        """An idempotency key's digest of an append, keyed: the head stores it, and a
        plain hash of low-entropy data would let a reader of the head guess it. As long as
        :func:`~s3log._format.values.append_digest`'s, which heads hold."""
        return hmac.new(self.key, dumps(kind) + encoded, hashlib.sha256).digest()[:APPEND_DIGEST_LEN]


def _aad(ref: str, kind: str) -> bytes:
    return _AAD + ref.encode("utf-8") + b"\x00" + kind.encode("utf-8")


def envelope_parts(data: Any) -> tuple[str, bytes, bytes] | None:
    """``(key_ref, nonce, ciphertext)`` if ``data`` is an envelope, else None."""
    if type(data) is not cbor2.CBORTag or data.tag != ENVELOPE_TAG:
        return None
    v = data.value
    if (type(v) in (list, tuple) and len(v) == 3 and type(v[0]) is str and type(v[1]) is bytes
            and len(v[1]) == NONCE_LEN and type(v[2]) is bytes):
        return v[0], v[1], v[2]
    raise EncryptionError(None, f"malformed envelope (tag {ENVELOPE_TAG} must hold [key ref, 12-byte nonce, "
                          "ciphertext])")


def is_envelope(data: Any) -> bool:
    """Whether ``data`` is an envelope's tag (well formed or not)."""
    return type(data) is cbor2.CBORTag and data.tag == ENVELOPE_TAG


def key_ref(session: str, n: int) -> str:
    """The name of a session's ``n``-th data key (1 first, rotation adds one)."""
    return f"{session}/{n:06d}"


def key_object(ref: str, kek: str, wrapped: bytes) -> bytes:
    """A key object's body: the wrapped data key and what unwraps it (docs/format.md)."""
    return dumps({"v": 1, "ref": ref, "alg": ALGORITHM, "kek": kek, "wrapped": wrapped})


def parse_key_object(body: bytes, where: str) -> tuple[str, bytes]:
    """``(kek, wrapped)`` of a key object; CorruptionError if it is not one."""
    try:
        obj = loads(body)
    except Exception as exc:  # any decoding failure is corruption of this object
        raise CorruptionError(where, f"key object is not CBOR: {exc}") from None
    if (type(obj) is not dict or obj.get("v") != 1 or obj.get("alg") != ALGORITHM
            or type(obj.get("kek")) is not str or type(obj.get("wrapped")) is not bytes):
        raise CorruptionError(where, "key object is not {v: 1, ref, alg: AES-256-GCM, kek, wrapped}")
    return obj["kek"], obj["wrapped"]
