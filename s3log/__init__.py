"""s3log: durable, hash-chained, append-only session logs on S3.

Sessions are chains of immutable CBOR segments plus a head object replaced only by
conditional PUT; a writer that loses a race forks instead of losing data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .codec import Entry, Head, ParentRef
from .errors import (
    ConflictError,
    CorruptionError,
    EntryNotFound,
    FormatVersionError,
    InvalidEntryError,
    InvalidSessionIdError,
    S3LogError,
    SessionExists,
    SessionExpired,
    SessionNotFound,
    StoreError,
)
from .log import Log, Writer
from .protocol import CommitResult, ForkInfo, LineageStep, LogConfig, RetryPolicy
from .reducer import EntriesReducer, NullReducer, Reducer
from .retention import ExpireReport
from .store.memory import AsyncMemoryStore, MemoryStore
from .writer import SessionInfo, SessionView, VerifyReport

if TYPE_CHECKING:
    from .aio import AsyncLog, AsyncWriter
    from .store.aio_s3 import AsyncS3Store
    from .store.fast import AsyncObstoreStore, ObstoreStore
    from .store.s3 import S3Store

__version__ = "0.1.0"

# boto3 and aioboto3 take a while to import: load them only when asked for.
_LAZY = {
    "S3Store": ("s3log.store.s3", "S3Store"),
    "AsyncS3Store": ("s3log.store.aio_s3", "AsyncS3Store"),
    "AsyncLog": ("s3log.aio", "AsyncLog"),
    "AsyncWriter": ("s3log.aio", "AsyncWriter"),
    "ObstoreStore": ("s3log.store.fast", "ObstoreStore"),
    "AsyncObstoreStore": ("s3log.store.fast", "AsyncObstoreStore"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 's3log' has no attribute {name!r}")


__all__ = [
    "AsyncLog", "AsyncMemoryStore", "AsyncObstoreStore", "AsyncS3Store", "AsyncWriter", "CommitResult", "ConflictError",
    "CorruptionError", "EntriesReducer", "Entry", "EntryNotFound", "ForkInfo", "FormatVersionError", "Head",
    "InvalidEntryError", "InvalidSessionIdError", "LineageStep", "Log", "LogConfig", "MemoryStore",
    "NullReducer", "ObstoreStore", "ParentRef", "Reducer", "RetryPolicy", "S3LogError", "S3Store", "SessionExists",
    "SessionExpired", "ExpireReport",
    "SessionInfo", "SessionNotFound", "SessionView", "StoreError", "VerifyReport", "Writer",
]
