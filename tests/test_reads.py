"""Reads: cancelled mid-request they leave nothing behind; big heads near the bounds read back whole.
"""

from __future__ import annotations

import asyncio
import gc

import pytest

import s3log
from s3log._drive import gcpause as _gcpause
from s3log._format.columns import RunColumns
from s3log._protocol.ops import Blob
from s3log.store.memory import AsyncMemoryStore


class _SlowStore(AsyncMemoryStore):
    """Gets of segments wait until released, so a read can be cancelled mid-Parallel."""

    def __init__(self, store: s3log.MemoryStore) -> None:
        super().__init__(store)
        self.release = asyncio.Event()
        self.started = 0

    async def get(self, key: str) -> Blob:
        if "/seg" in key or "segments" in key:
            self.started += 1
            if self.started > 1:  # the first arrives (and is decoded), the rest wait
                await self.release.wait()
        return await super().get(key)


def test_a_read_cancelled_mid_parallel_leaves_no_pause_and_reads_again() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=300, fanout=64))
    w = log.create()
    for i in range(30):
        w.append("k", {"i": i, "t": "x" * 200})
        w.commit()
    sid = w.session_id
    expected = log.read(sid).entries
    assert len(log.head(sid).segments) >= 4

    async def main() -> None:
        slow = _SlowStore(store)
        alog = s3log.AsyncLog(slow)
        for verb in (alog.read, alog.read_runs):
            slow.started = 0
            task = asyncio.ensure_future(verb(sid))
            while slow.started < 2:
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert gc.isenabled() and _gcpause.depth() == 0
        slow.release.set()
        assert (await alog.read(sid)).entries == expected

    asyncio.run(main())


@pytest.mark.parametrize("signed", [False, True])
def test_heads_near_the_pending_bound_with_a_lease_read_back_whole(signed: bool) -> None:
    """Default bounds, big commits: heads past the tail bound, near the pending one,
    carrying a lease (and a signature): every entry read back, by read and read_runs."""
    store = s3log.MemoryStore()
    signer = verifier = None
    if signed:
        pytest.importorskip("cryptography")
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        from s3log.signing import Ed25519Signer, PublicKeyVerifier

        signer = Ed25519Signer(Ed25519PrivateKey.generate())
        verifier = PublicKeyVerifier([signer.public_key])
    log = s3log.Log(store, config=s3log.LogConfig(signer=signer, verifier=verifier))
    w = log.create()
    w.hold_lease("worker", 60_000)
    sizes = [30_000, 3_000, 200_000, 10, 250_000, 40_000, 1]
    for n, size in enumerate(sizes):
        for j in range(max(1, size // 10_000)):
            w.append("k", {"n": n, "j": j, "pad": "x" * min(size, 10_000)})
        w.commit()
        head_bytes = len(store.get(log.layout.head(w.session_id)).body)
        assert head_bytes <= log._core.config.pending_max_bytes
    got = log.read(w.session_id).entries
    assert [e.data["n"] for e in got] == [n for n, s in enumerate(sizes) for _ in range(max(1, s // 10_000))]
    head, runs = log.read_runs(w.session_id)  # type: ignore[misc]
    assert sum(len(r.hashes) if isinstance(r, RunColumns) else len(r) for r in runs) == len(got)
    assert head.lease is not None and head.lease.owner == "worker"
