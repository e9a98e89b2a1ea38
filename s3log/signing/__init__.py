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

from s3log._format.values import Signature
from s3log.signing.checkpoints import Checkpoint, Checkpointer, CheckpointError, CheckpointReport, check_checkpoints
from s3log.signing.heads import (
    append_keys_digest,
    check_log_id,
    compacted_digest,
    default_log_id,
    head_payload,
    sign_head,
    signed_head,
    verified_head,
    verify_head,
)
from s3log.signing.keys import (
    ECDSA_SHA_256,
    ED25519,
    RSASSA_PSS_SHA_256,
    AnyVerifier,
    Ed25519Signer,
    PublicKeyVerifier,
    SignatureError,
    SignatureRejected,
    Signer,
    SigningError,
    Verifier,
    key_id_for,
)
from s3log.signing.kms import KmsSigner, KmsVerifier

__all__ = [
    "ECDSA_SHA_256", "ED25519", "RSASSA_PSS_SHA_256", "AnyVerifier", "Checkpoint", "CheckpointError",
    "CheckpointReport", "Checkpointer", "Ed25519Signer", "KmsSigner", "KmsVerifier", "PublicKeyVerifier",
    "Signature", "SignatureError", "SignatureRejected", "Signer", "SigningError", "Verifier", "check_checkpoints",
    "append_keys_digest", "check_log_id", "compacted_digest", "default_log_id", "head_payload", "key_id_for",
    "sign_head", "signed_head", "verified_head", "verify_head",
]
