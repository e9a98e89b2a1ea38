"""The public surface: what ``__all__`` exports resolves, is documented, and is public.

Every public module or package lists its names in ``__all__``; each one resolves (a
lazily imported one too), a class or function among them has a docstring, and no name
starting with ``_`` is exported. Each exported class is defined in the module its name
or its kind points to (:data:`HOMES`), so a reader finds it where it looks first.
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

#: The modules whose ``__all__`` is the public API (docs/ documents these).
PUBLIC = [
    "s3log", "s3log.agent", "s3log.analytics", "s3log.integrations", "s3log.integrations.langgraph",
    "s3log.integrations.openai_agents", "s3log.otel", "s3log.signing", "s3log.store", "s3log.testing.plugin",
    "s3log.testing.sim", "s3log.urls",
]

#: Where a class of each kind lives, by a pattern on its name: errors and warnings in
#: an ``errors`` module or the feature they belong to, what a verb returns in
#: ``results``, the format's values in ``values``. Otherwise the module (or its
#: package) is named after one of the words of the class name.
KIND_HOMES = [
    (re.compile(r"(Error|Exists|NotFound|Expired|Replaced|Busy|Warning|Reused|Rejected|Shredded)$"), None),
    (re.compile(r"(Info|Report|Step|View|Result|Entry|Sessions|Progress)$"), {"s3log.results"}),
    (re.compile(r"^(Entry|Head|ParentRef|Signature)$"), {"s3log._format.values"}),
    (re.compile(r"(Config|Policy)$"), {"s3log.config"}),
    (re.compile(r"(Signer|Verifier|Checkpoint\w*)$"), {"s3log.signing"}),
]

#: Classes whose module says what they are by another word (the async log's module is
#: ``aio``, the agent's and integrations' shells are ``sync``/``aio``, the reducers'
#: module is ``reducer``...). A class added to ``__all__`` outside its home fails here.
HOMES = {
    "AsyncLog": "s3log.aio", "AsyncWriter": "s3log.aio", "Writer": "s3log.log",
    "AgentSession": "s3log.agent.sync", "AsyncAgentSession": "s3log.agent.aio",
    "AgentReducer": "s3log.agent.state", "SessionState": "s3log.agent.state",
    "ReadOnlyDict": "s3log.agent.state", "ReadOnlyList": "s3log.agent.state", "SummarySpan": "s3log.agent.state",
    "S3LogSaver": "s3log.integrations.langgraph.sync", "AsyncS3LogSaver": "s3log.integrations.langgraph.aio",
    "S3LogSession": "s3log.integrations.openai_agents",
    "ObstoreStore": "s3log.store.obstore", "AsyncObstoreStore": "s3log.store.obstore",
    "AsyncS3Store": "s3log.store.aio_s3", "AsyncMemoryStore": "s3log.store.memory",
    "ObjectStore": "s3log.store.base", "AsyncObjectStore": "s3log.store.base", "RequestCounter": "s3log.store.base",
    "LocalS3": "s3log.testing.localserver", "LogURL": "s3log.urls", "Violation": "s3log.testing.sim.outcome",
}


def _exports() -> list[tuple[str, str]]:
    return [(m, n) for m in PUBLIC for n in importlib.import_module(m).__all__]


@pytest.mark.parametrize("module", PUBLIC)
def test_every_public_module_lists_its_names(module: str) -> None:
    names = importlib.import_module(module).__all__
    assert len(names) == len(set(names)), f"{module}.__all__ names one twice"
    assert not [n for n in names if n.startswith("_")], f"{module}.__all__ exports a private name"


@pytest.mark.parametrize(("module", "name"), _exports(), ids=[f"{m}.{n}" for m, n in _exports()])
def test_every_exported_name_resolves_and_is_documented(module: str, name: str) -> None:
    value = getattr(importlib.import_module(module), name)  # a lazy name is imported here
    if inspect.isclass(value) or inspect.isfunction(value):
        assert (value.__doc__ or "").strip(), f"{module}.{name} has no docstring"
        assert not value.__module__.split(".")[-1].startswith("_") or value.__module__ == "s3log._extras", (
            f"{module}.{name} is defined in a private module ({value.__module__})")


def _words(name: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Z0-9][a-z0-9]*|[a-z0-9]+", name)}


@pytest.mark.parametrize(("module", "name"), _exports(), ids=[f"{m}.{n}" for m, n in _exports()])
def test_each_public_class_lives_where_its_name_points(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    if not inspect.isclass(cls):
        return
    home = cls.__module__
    if name in HOMES:
        assert home == HOMES[name], f"{name} is in {home}, not {HOMES[name]}"
        return
    for pattern, homes in KIND_HOMES:
        # A feature's own results may live with the feature (analytics' progress).
        if pattern.search(name) and (homes is None or home in homes or home.startswith(module)):
            return
    parts = set(home.split(".")[1:])
    assert parts & (_words(name) | {w + "s" for w in _words(name)}), (
        f"{module}.{name} is defined in {home}, which its name does not point to: move it, or name its home in HOMES")
