"""The I/O requests the sans-IO core yields, and the values drivers send back.

A protocol procedure is a generator: it yields an op, the driver performs it against
a store and sends the result back in (or throws the store's error in). The sync and
async drivers differ only in how they wait; every decision stays in the procedure.

What a ``yield`` evaluates to is not typed (a generator has one send type for every
op), so procedures perform ops through the typed helpers at the end of this module
(:func:`get`, :func:`put_if_absent`, ...: ``blob = yield from ops.get(key)``), the one
place each op is paired with the type of its result.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, overload

from s3log.errors import ConditionalDeleteUnsupported, StoreError

if TYPE_CHECKING:
    from s3log._format.values import Signature

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Blob:
    """An object's body and ETag."""

    body: bytes
    etag: str


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One key of a listing."""

    key: str
    size: int
    last_modified_ms: int
    etag: str = ""


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a listing: keys, common prefixes (with a delimiter) and a cursor."""

    objects: list[ObjectInfo]
    prefixes: list[str]
    next_token: str | None


@dataclass(frozen=True, slots=True)
class Get:
    """GET an object. Result: :class:`Blob`; raises ObjectNotFound.

    ``decode``: a pure function of the blob (no I/O, no decision) that a driver may
    apply as soon as the body arrives, inside a :class:`Parallel`, so decoding one
    object overlaps the transfer of the others. The result is then what it returns, or
    the exception it raised; a procedure accepts the plain blob as well (a driver need
    not decode, see :func:`decoded`).
    """

    key: str
    decode: Callable[[Blob], Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class PutIfAbsent:
    """PUT with ``If-None-Match: *``. Result: the new ETag; raises PreconditionFailed.

    Never retried by a driver: what a failed create-only PUT means is decided by the
    procedure (:func:`s3log._protocol.write.put_immutable`, :mod:`s3log._protocol.decide`).
    """

    key: str
    body: bytes


@dataclass(frozen=True, slots=True)
class PutIfMatch:
    """PUT with ``If-Match: etag``. Result: the new ETag. Never retried by a driver."""

    key: str
    body: bytes
    etag: str


@dataclass(frozen=True, slots=True)
class ListKeys:
    """LIST one page under a prefix. Result: :class:`ListPage`.

    ``start_after``: list only keys (and common prefixes) after this key, as S3's
    ``StartAfter`` (ignored by a store once ``token`` is given: the token is further).
    """

    prefix: str
    delimiter: str | None = None
    token: str | None = None
    max_keys: int = 1000
    start_after: str | None = None


@dataclass(frozen=True, slots=True)
class Delete:
    """DELETE an object (deleting a missing key succeeds). Result: None."""

    key: str


@dataclass(frozen=True, slots=True)
class DeleteIfMatch:
    """DELETE with ``If-Match: etag``. Result: None; raises PreconditionFailed if the
    object's ETag differs, ObjectNotFound if it is missing, ConditionalDeleteUnsupported
    on a store that cannot make a DELETE conditional (nothing sent).

    Never retried by a driver: after a lost reply a second try may meet a 404 because
    the first one landed, which a driver cannot tell from "someone else deleted it";
    the procedure decides (:func:`s3log._protocol.delete.delete_session` reads the head again).
    """

    key: str
    etag: str


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait before retrying. Result: None."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Sign:
    """Sign ``payload`` with ``signer`` (a :class:`s3log.signing.Signer`). Result: its
    :class:`~s3log._format.values.Signature`; the signer's error (SigningError) is thrown in.

    A driver performs it: a signer that may block (a KMS call, ``blocking`` true or
    absent) runs off an async driver's event loop, a local one (Ed25519) inline.
    """

    signer: Any = field(compare=False)
    payload: bytes


@dataclass(frozen=True, slots=True)
class Verify:
    """Check ``sig`` over ``payload`` with ``verifier`` (a :class:`s3log.signing.Verifier`).
    Result: None; the verifier's SignatureRejected is thrown in. Performed as :class:`Sign`."""

    verifier: Any = field(compare=False)
    payload: bytes
    sig: Any


@dataclass(frozen=True, slots=True)
class Wrap:
    """Wrap a new data key ``key`` (named ``ref``) with ``provider`` (a
    :class:`s3log.encryption.KeyProvider`). Result: ``(kek, wrapped)``; the provider's
    EncryptionError is thrown in. Performed as :class:`Sign`: no store request."""

    provider: Any = field(compare=False)
    ref: str
    key: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class Unwrap:
    """Unwrap the data key ``ref`` (wrapped by ``kek``) with ``provider``. Result: the
    key's bytes; the provider's EncryptionError is thrown in. Performed as :class:`Sign`."""

    provider: Any = field(compare=False)
    ref: str
    kek: str
    wrapped: bytes


@dataclass(frozen=True, slots=True)
class Parallel:
    """Run ops concurrently. Result: a list, per op, of its result or its StoreError."""

    ops: tuple[Op, ...]


#: The ops a store performs (the drivers match on them, one store method each).
StoreOp = Get | PutIfAbsent | PutIfMatch | ListKeys | Delete | DeleteIfMatch
#: The ops a key performs (a signer, a verifier or a key provider): no store request.
KeyOp = Sign | Verify | Wrap | Unwrap
Op = StoreOp | KeyOp | Sleep | Parallel
#: A protocol procedure returning ``T``.
Proc = Generator[Op, Any, T]


def is_retryable(op: Op) -> bool:
    """Whether a driver may repeat ``op`` by itself after a transient error: only reads,
    listings and unconditional deletes, which are idempotent. Writes (conditional
    DELETEs too) are decided by the procedure."""
    return isinstance(op, (Get, ListKeys, Delete))


def call_key(op: KeyOp) -> Any:
    """Perform ``op`` with its key: the one place a signer, verifier or key provider is called."""
    if isinstance(op, Sign):
        return op.signer.sign(op.payload)
    if isinstance(op, Wrap):
        return op.provider.wrap(op.ref, op.key)
    if isinstance(op, Unwrap):
        return op.provider.unwrap(op.ref, op.kek, op.wrapped)
    op.verifier.verify(op.payload, op.sig)
    return None


def blocks(op: KeyOp) -> bool:
    """Whether ``op``'s key may block (a network call: KMS), so an async driver runs it in a
    thread. A key says so with a ``blocking`` attribute; one that does not is assumed to."""
    key = (op.signer if isinstance(op, Sign) else op.provider if isinstance(op, (Wrap, Unwrap))
           else op.verifier)
    return bool(getattr(key, "blocking", True))


def call_store(store: Any, op: StoreOp) -> Blob | str | ListPage | None:
    """Perform ``op`` on a blocking store: the one place each op meets its store method."""
    match op:
        case Get(key):
            result: Blob = store.get(key)
            return result
        case PutIfAbsent(key, body):
            created: str = store.put_if_absent(key, body)
            return created
        case PutIfMatch(key, body, etag):
            replaced: str = store.put_if_match(key, body, etag)
            return replaced
        case ListKeys():
            page: ListPage = store.list(op.prefix, **list_kwargs(op))
            return page
        case Delete(key):
            store.delete(key)
            return None
        case DeleteIfMatch(key, etag):
            call_delete_if_match(store, key, etag)
            return None


def call_delete_if_match(store: Any, key: str, etag: str) -> Any:
    """Call ``store.delete_if_match`` (awaitable on an async store): a store written
    before the method existed cannot delete conditionally, and says so as obstore does
    (ConditionalDeleteUnsupported), so :func:`s3log._protocol.delete.delete_session` falls back."""
    method = getattr(store, "delete_if_match", None)
    if method is None:
        raise ConditionalDeleteUnsupported(
            f"{type(store).__name__} has no delete_if_match", key=key, code="NotImplemented")
    return method(key, etag)


def decoded(op: Op, result: Any) -> Any:
    """A driver's result for ``op`` in a :class:`Parallel`: for a :class:`Get` with a
    ``decode``, what it makes of the blob (or the exception it raised, which the
    procedure raises in its place); anything else as it is."""
    if type(op) is Get and op.decode is not None and type(result) is Blob:
        try:
            return op.decode(result)
        except Exception as exc:  # the procedure raises it, in key order with the others
            return exc
    return result


def list_kwargs(op: ListKeys) -> dict[str, Any]:
    """The keyword arguments of a store's ``list`` for ``op``."""
    return list_keywords(op.delimiter, op.token, op.max_keys, op.start_after)


def list_keywords(delimiter: str | None, token: str | None, max_keys: int, start_after: str | None) -> dict[str, Any]:
    """The keyword arguments of a store's ``list`` (also for a store passing a LIST on)."""
    kwargs: dict[str, Any] = {"delimiter": delimiter, "token": token, "max_keys": max_keys}
    if start_after is not None:
        # Only when set: a store written before start_after existed keeps working.
        kwargs["start_after"] = start_after
    return kwargs


# ------------------------------------------------------------------ typed requests
# Each helper yields one op and returns what the drivers send back for it, typed:
# the driver contract of the op's docstring, written down once for mypy.


def get(key: str) -> Proc[Blob]:
    """GET ``key``: its body and ETag. Raises ObjectNotFound (or the store's error)."""
    blob: Blob = yield Get(key)
    return blob


def put_if_absent(key: str, body: bytes) -> Proc[str]:
    """Create ``key`` (``If-None-Match: *``): the new ETag. Raises PreconditionFailed if it exists."""
    etag: str = yield PutIfAbsent(key, body)
    return etag


def put_if_match(key: str, body: bytes, etag: str) -> Proc[str]:
    """Replace ``key`` if its ETag is ``etag``: the new ETag. Raises PreconditionFailed otherwise."""
    new: str = yield PutIfMatch(key, body, etag)
    return new


def list_page(
    prefix: str,
    *,
    delimiter: str | None = None,
    token: str | None = None,
    max_keys: int = 1000,
    start_after: str | None = None,
) -> Proc[ListPage]:
    """One page of keys under ``prefix`` (see :class:`ListKeys`)."""
    page: ListPage = yield ListKeys(prefix, delimiter, token, max_keys, start_after)
    return page


def delete(key: str) -> Proc[None]:
    """DELETE ``key`` (a missing key is no error)."""
    yield Delete(key)


def delete_if_match(key: str, etag: str) -> Proc[None]:
    """DELETE ``key`` if its ETag is ``etag``. Raises PreconditionFailed if it differs,
    ObjectNotFound if it is missing, ConditionalDeleteUnsupported on a store without it."""
    yield DeleteIfMatch(key, etag)


def sign(signer: Any, payload: bytes) -> Proc[Signature]:
    """The signature of ``payload`` by ``signer``, made by the driver (see :class:`Sign`)."""
    sig: Signature = yield Sign(signer, payload)
    return sig


def verify(verifier: Any, payload: bytes, sig: Signature) -> Proc[None]:
    """Check ``sig`` over ``payload`` with ``verifier``, in the driver (see :class:`Verify`);
    raises the verifier's SignatureRejected."""
    yield Verify(verifier, payload, sig)


def sleep(seconds: float) -> Proc[None]:
    """Wait ``seconds`` (virtual time under the simulator)."""
    yield Sleep(seconds)


@overload
def parallel(ops: Sequence[Get]) -> Proc[list[Blob | StoreError]]: ...
@overload
def parallel(ops: Sequence[PutIfAbsent | PutIfMatch]) -> Proc[list[str | StoreError]]: ...
@overload
def parallel(ops: Sequence[Delete]) -> Proc[list[StoreError | None]]: ...
@overload
def parallel(ops: Sequence[Op]) -> Proc[list[Any]]: ...
def parallel(ops: Sequence[Op]) -> Proc[list[Any]]:
    """Perform ``ops`` concurrently: per op, in order, its result or the StoreError it met.

    Errors are returned, not raised, so one failed request does not hide the others'
    outcomes; the caller decides what each means.
    """
    results: list[Any] = yield Parallel(tuple(ops))
    return results
