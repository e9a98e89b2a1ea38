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

from s3log._format.cbor import _length_head, dumps, loads
from s3log.errors import CorruptionError, EncryptionError

#: The CBOR tag of an encrypted entry's data (first-come-first-served range, unassigned).
ENVELOPE_TAG = 21299
#: The one cipher of format 1: AES-256-GCM, 96-bit nonces, 128-bit tags.
ALGORITHM = "AES-256-GCM"
NONCE_LEN = 12
KEY_LEN = 32
_AAD = b"s3log/enc/1\x00"
_NONCE_LABEL = b"s3log/nonce/1\x00"
_NONCE_HEAD = b"\x4c"  # the head of a 12-byte string
_MISSING: Any = object()
#: Envelopes a writer sealed whose data it keeps, so its reducer and its commit's
#: results need not decrypt them again (cleared when full: a cache, not a record).
_RECENT_MAX = 4096


class DataKey:
    """A session's data key, unwrapped: ``ref`` (``{session}/{n:06d}``) and its bytes."""

    __slots__ = ("_aads", "_cipher", "_prefix", "_recent", "key", "ref")

    def __init__(self, ref: str, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.ref = ref
        self.key = key
        self._cipher = AESGCM(key)  # made once: a commit seals with it every entry
        self._recent: dict[tuple[str, bytes, bytes], Any] = {}
        self._aads: dict[str, bytes] = {}
        # An envelope's encoding up to its nonce: the tag, the array head, the ref.
        self._prefix = dumps(cbor2.CBORTag(ENVELOPE_TAG, [ref]))[:-len(dumps([ref]))] + b"\x83" + dumps(ref)

    def __repr__(self) -> str:
        return f"DataKey({self.ref!r})"

    def seal(self, kind: str, plaintext: bytes, nonce: bytes, value: Any = _MISSING) -> cbor2.CBORTag:
        """The envelope of ``plaintext`` (a data item's deterministic CBOR); ``value``, its
        decoded form if given, is what :meth:`open` returns for this very envelope."""
        return self.seal_cbor(kind, plaintext, nonce, value)[0]

    def seal_cbor(self, kind: str, plaintext: bytes, nonce: bytes,
                  value: Any = _MISSING) -> tuple[cbor2.CBORTag, bytes]:
        """:meth:`seal`, and the envelope's deterministic encoding (laid out here: a
        writer seals every entry it appends)."""
        ct = self._cipher.encrypt(nonce, plaintext, self._aad(kind))
        if value is not _MISSING:
            recent = self._recent
            if len(recent) >= _RECENT_MAX:
                recent.clear()
            recent[(kind, nonce, ct)] = value
        encoded = b"".join((self._prefix, _NONCE_HEAD, nonce, _length_head(0x40, len(ct)), ct))
        return cbor2.CBORTag(ENVELOPE_TAG, [self.ref, nonce, ct]), encoded

    def _aad(self, kind: str) -> bytes:
        aad = self._aads.get(kind)
        if aad is None:
            aad = _aad(self.ref, kind)
            if len(self._aads) < 4096:  # kinds are few; a flood of new ones is not cached
                self._aads[kind] = aad
        return aad

    def open(self, kind: str, nonce: bytes, ciphertext: bytes, session: str | None) -> Any:
        """The data an envelope sealed; EncryptionError if it does not authenticate."""
        from cryptography.exceptions import InvalidTag

        # One this key sealed, byte for byte (its tag included): authentic as sealed.
        value = self._recent.get((kind, nonce, ciphertext), _MISSING)
        if value is not _MISSING:
            return value
        try:
            plain = self._cipher.decrypt(nonce, ciphertext, self._aad(kind))
        except InvalidTag:
            raise EncryptionError(session, "entry data does not authenticate under its data key "
                                  "(a wrong key, or changed ciphertext)", key_ref=self.ref) from None
        return loads(plain)

    def synthetic_nonce(self, append_key: str, kind: str, plaintext: bytes) -> bytes:
        """The nonce of an append with an idempotency key: HMAC-SHA-256 under the data key
        of the key, kind and data, cut to 12 bytes. A retry seals to the same bytes (so the
        head's digest of it, over what is stored, finds it); a nonce repeats only with
        the very plaintext it sealed before, which GCM allows."""
        msg = b"".join((_NONCE_LABEL, dumps(append_key), dumps(kind), plaintext))
        return hmac.new(self.key, msg, hashlib.sha256).digest()[:NONCE_LEN]


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
