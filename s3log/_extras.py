"""Optional dependencies: import them so that a missing one names the extra to install.

s3log's core needs only boto3 and cbor2. Everything else comes with an
extra (``async``, ``cli``, ``fast``, ``analytics``, ``dask``, ``langgraph``,
``openai-agents``, ``local``); an ``ImportError`` that only says "No module named
'aiobotocore'" leaves the user to guess which one. :func:`require` and :func:`extra`
raise :class:`~s3log.errors.MissingExtraError` (an ``ImportError``) instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from s3log.errors import MissingExtraError

#: Every extra of the distribution, so a typo at an import site fails loudly in tests.
EXTRAS = frozenset({"async", "cli", "local", "fast", "analytics", "dask", "langgraph", "openai-agents", "sign", "otel"})


def _check(extra_name: str) -> None:
    if extra_name not in EXTRAS:
        raise ValueError(f"unknown s3log extra {extra_name!r}; known: {', '.join(sorted(EXTRAS))}")


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` and return it, or raise :class:`MissingExtraError` naming ``extra``.

    For modules used as a namespace (``obstore = require("obstore", "fast")``).
    """
    _check(extra)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(exc.name or module, extra, str(exc)) from exc


@contextmanager
def extra(name: str) -> Iterator[None]:
    """Turn an ``ImportError`` raised by the imports inside the block into :class:`MissingExtraError`.

    For ``from X import Y`` lines whose names type checkers must still see::

        with extra("langgraph"):
            from langgraph.checkpoint.base import BaseCheckpointSaver
    """
    _check(name)
    try:
        yield
    except MissingExtraError:
        raise
    except ImportError as exc:
        raise MissingExtraError(exc.name or "a dependency", name, str(exc)) from exc
