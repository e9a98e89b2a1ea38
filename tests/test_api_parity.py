"""The same verb means the same thing on both sides.

``Log``/``AsyncLog``, ``Writer``/``AsyncWriter`` and ``AgentSession``/``AsyncAgentSession``
expose the same public names with the same parameters; the async side awaits what does
I/O, and closes with ``aclose``. A name added to one side only fails here.
"""

from __future__ import annotations

import inspect

import pytest

import s3log
import s3log.agent
from s3log.agent import AgentSession, AsyncAgentSession

# Names that exist on one side only, on purpose (their counterpart is the context protocol).
ONE_SIDED = {
    "Log": {"close"},            # AsyncLog.aclose
    "AsyncLog": {"aclose"},
    "Writer": set(),
    "AsyncWriter": set(),
    "AgentSession": {"close"},   # AsyncAgentSession.aclose
    "AsyncAgentSession": {"aclose"},
}


def _public(cls: type) -> dict[str, object]:
    return {n: getattr(cls, n) for n in dir(cls) if not n.startswith("_")}


def _params(fn: object) -> list[tuple[str, object, object]]:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize(("sync", "aio"), [(s3log.Log, s3log.AsyncLog), (s3log.Writer, s3log.AsyncWriter),
                                           (AgentSession, AsyncAgentSession)])
def test_same_names_and_signatures(sync: type, aio: type) -> None:
    a, b = _public(sync), _public(aio)
    assert set(a) - ONE_SIDED[sync.__name__] == set(b) - ONE_SIDED[aio.__name__]
    for name in set(a) & set(b):
        fa, fb = a[name], b[name]
        if isinstance(fa, property) or isinstance(fb, property):
            assert isinstance(fa, property) and isinstance(fb, property), name
            continue
        if not callable(fa):
            continue
        assert _params(fa) == _params(fb), f"{sync.__name__}.{name} and {aio.__name__}.{name} differ"


def test_async_close_is_aclose_everywhere() -> None:
    """No async class or function is named ``close``: the async counterpart of every
    ``close`` (and of ``drain``) is ``aclose`` (``adrain``), awaited."""
    from s3log.integrations.openai_agents import S3LogSession

    for cls in (s3log.AsyncLog, s3log.AsyncWriter, AsyncAgentSession, S3LogSession):
        assert not hasattr(cls, "close"), cls
    for cls in (s3log.AsyncLog, AsyncAgentSession, S3LogSession):
        assert inspect.iscoroutinefunction(cls.aclose), cls
    assert inspect.iscoroutinefunction(s3log.agent.aclose) and inspect.iscoroutinefunction(s3log.agent.adrain)
    assert not inspect.iscoroutinefunction(s3log.agent.close) and not inspect.iscoroutinefunction(s3log.agent.drain)


def test_append_queues_on_both_sides() -> None:
    import asyncio

    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    t = w.append("k", 1)
    assert isinstance(t, int) and w.pending == 1

    async def run() -> None:
        alog = s3log.AsyncLog(s3log.AsyncMemoryStore())
        aw = await alog.create()
        ticket = aw.append("k", 1)
        assert isinstance(ticket, int) and aw.pending == 1
        await aw.commit()
        assert aw.pending == 0
        entry = await aw.append_durable("k", 2)
        assert entry.data == 2
        assert not inspect.isawaitable(aw.append("k", 3))  # a ticket, nothing else: it only queues
        await aw.commit()
        assert [e.data for e in (await alog.read(aw.session_id)).entries] == [1, 2, 3]

    asyncio.run(run())
