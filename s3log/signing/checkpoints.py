"""Signed checkpoints: ``(log, session, seq, hash)`` statements kept in another store.

:class:`Checkpointer` writes one create-only, signed object per checkpointed seq (to a
bucket that may have Object Lock); :func:`check_checkpoints` verifies them and checks
that each session still holds what they recorded (:class:`CheckpointError` if not).
The payload is specified in docs/format.md ("Signed checkpoints"). Its own room: a
maintenance tool over a log and a store, which no commit or read goes through.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from s3log._format.cbor import dumps, loads
from s3log._format.values import HASH_LEN, Signature
from s3log.errors import CorruptionError, InvalidArgumentError, PreconditionFailed, SessionNotFound
from s3log.signing.heads import check_log_id
from s3log.signing.keys import SignatureError, SignatureRejected, Signer, Verifier

if TYPE_CHECKING:
    from s3log.store.base import ObjectStore

CHECKPOINT_PURPOSE = "s3log/checkpoint"
#: The version a checkpoint (and its signed payload) carries: its own, not the segment
#: format's. Version 3 names the log the checkpoint belongs to; versions 1 and 2 (no
#: release wrote them) named none, so one could be passed off as another log's
#: checkpoint of a session of the same id: they are refused, not read.
CHECKPOINT_VERSION = 3
CHECKPOINT_VERSIONS = (3,)


class CheckpointError(CorruptionError):
    """A session no longer holds what a signed checkpoint recorded (rewritten, cut, or deleted)."""

    def __init__(self, key: str, session: str, reason: str, *, seq: int | None = None) -> None:
        self.session = session
        super().__init__(key, f"session {session} does not match its checkpoint: {reason}", seq=seq)




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
