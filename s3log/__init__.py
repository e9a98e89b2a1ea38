"""s3log: durable, hash-chained, append-only session logs on S3.

Sessions are chains of immutable CBOR segments plus a head object replaced only by
conditional PUT; a writer that loses a race forks instead of losing data.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .codec import Entry, Head, ParentRef
from .config import LogConfig, RetryPolicy
from .env import Env
from .errors import (
    AppendKeyReused,
    ConflictError,
    CorruptionError,
    EntryNotFound,
    FormatVersionError,
    InvalidArgumentError,
    InvalidEntryError,
    InvalidPrefixError,
    InvalidSessionIdError,
    PreconditionsIgnoredError,
    S3LogError,
    SessionExists,
    SessionExpired,
    SessionNotFound,
    SessionReplaced,
    StoreError,
    WriterBusyError,
)
from .reducer import EntriesReducer, NullReducer, Reducer
from .results import (
    AckedEntry,
    CommitResult,
    ExpireReport,
    ForkInfo,
    LineageStep,
    SessionInfo,
    SessionView,
    VerifyReport,
)
from .store.memory import AsyncMemoryStore, MemoryStore

# A library logs; the application decides where records go. Without a handler of its
# own, Python's last-resort handler would print s3log's warnings (forks) to stderr.
logging.getLogger("s3log").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from .aio import AsyncLog, AsyncWriter
    from .log import Log, Writer
    from .store.aio_s3 import AsyncS3Store
    from .store.obstore import AsyncObstoreStore, ObstoreStore
    from .store.s3 import S3Store
    from .urls import open_async_log, open_log

__version__ = "0.1.0"

# boto3 and aioboto3 take a while to import: load them only when asked for. Log and
# Writer too: their driver imports asyncio and concurrent.futures, which
# would double the cost of `import s3log` for a process that only needs a name or two.
_LAZY = {
    "Log": ("s3log.log", "Log"),
    "Writer": ("s3log.log", "Writer"),
    "open_log": ("s3log.urls", "open_log"),
    "open_async_log": ("s3log.urls", "open_async_log"),
    "S3Store": ("s3log.store.s3", "S3Store"),
    "AsyncS3Store": ("s3log.store.aio_s3", "AsyncS3Store"),
    "AsyncLog": ("s3log.aio", "AsyncLog"),
    "AsyncWriter": ("s3log.aio", "AsyncWriter"),
    "ObstoreStore": ("s3log.store.obstore", "ObstoreStore"),
    "SignatureError": ("s3log.signing", "SignatureError"),
    "AsyncObstoreStore": ("s3log.store.obstore", "AsyncObstoreStore"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 's3log' has no attribute {name!r}")


__all__ = [
    "AckedEntry", "AppendKeyReused", "AsyncLog", "AsyncMemoryStore", "AsyncObstoreStore", "AsyncS3Store",
    "AsyncWriter", "CommitResult",
    "ConflictError",
    "CorruptionError", "EntriesReducer", "Entry", "EntryNotFound", "ForkInfo", "FormatVersionError", "Head",
    "Env", "InvalidArgumentError", "InvalidEntryError", "InvalidPrefixError", "InvalidSessionIdError",
    "PreconditionsIgnoredError", "SignatureError", "LineageStep", "Log", "LogConfig", "MemoryStore",
    "NullReducer", "ObstoreStore", "ParentRef", "Reducer", "RetryPolicy", "S3LogError", "S3Store", "SessionExists",
    "SessionExpired", "SessionReplaced", "ExpireReport",
    "SessionInfo", "SessionNotFound", "SessionView", "StoreError", "VerifyReport", "Writer", "WriterBusyError",
    "open_async_log", "open_log",
]


def __dir__() -> list[str]:
    """The module's names, the lazy ones included."""
    return sorted(set(globals()) | set(__all__))
