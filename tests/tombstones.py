"""Tombstone heads written straight to a store, for tests of how readers, writers, gc and
``Log.delete`` treat one.

``Log.expire`` deletes an idle session's head (docs/decisions/0036) and writes no
tombstone; readers still read a head that carries ``expired`` as an expired session
(docs/format.md, "Head"), and these helpers make such heads: what a sweep with write
access would store.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from s3log._format.codec import decode_head, encode_head
from s3log._format.values import Head
from s3log._protocol import listing, ops, state
from s3log._protocol.ops import Proc
from s3log.errors import ObjectNotFound
from s3log.signing import sign_head


def tombstone(head: Head, *, now: int, nonce: str, idle_for_ms: int) -> Head:
    """The tombstone of ``head``: no entries, ``expired`` set, gc's grace from ``now``."""
    return replace(
        head, version=head.version + 1, hash=state.tombstone_hash(head.session, head.hash),
        segments=(), levels=(), tail=(), updated_at=now, writer=nonce, ts_min=None, ts_max=None,
        retired_at=now, pending=None,
        extra={**head.extra, state.EXPIRED_FIELD: {"at": now, "seq": head.seq, "hash": head.hash,
                                                      "idle_for_ms": idle_for_ms}},
    )


@dataclass
class Tombstoned:
    """The sessions :func:`tombstone_idle` replaced by a tombstone."""

    expired: list[str]


def tombstone_proc(layout: Any, cfg: Any, idle_for_ms: int) -> Proc[Tombstoned]:
    """Replace the head of every session idle for ``idle_for_ms`` by its (signed) tombstone."""
    now = cfg.env.now_ms()
    done: list[str] = []
    for sid in (yield from listing.list_session_ids(layout)):
        key = layout.head(sid)
        try:
            blob = yield from ops.get(key)
        except ObjectNotFound:
            continue
        head = decode_head(blob.body, key)
        if head.expired or head.updated_at >= now - idle_for_ms:
            continue
        tomb = sign_head(cfg.signer, tombstone(head, now=now, nonce=cfg.env.nonce(), idle_for_ms=idle_for_ms),
                         layout.log_id)
        yield from ops.put_if_match(key, encode_head(tomb), blob.etag)
        done.append(sid)
    return Tombstoned(done)


def _ms(idle_for: timedelta | int) -> int:
    return idle_for if isinstance(idle_for, int) else idle_for // timedelta(milliseconds=1)


def tombstone_idle(log: Any, *, idle_for: timedelta | int) -> Tombstoned:
    """:func:`tombstone_proc` through a sync ``Log``."""
    core = log._core
    result: Tombstoned = log._run(tombstone_proc(core.layout, core.config, _ms(idle_for)))
    return result


async def tombstone_idle_async(log: Any, *, idle_for: timedelta | int) -> Tombstoned:
    """:func:`tombstone_proc` through an ``AsyncLog``."""
    core = log._core
    result: Tombstoned = await log._run(tombstone_proc(core.layout, core.config, _ms(idle_for)))
    return result
