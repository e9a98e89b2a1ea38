"""s3log: durable, hash-chained, append-only session logs on S3.

Sessions are chains of immutable CBOR segments plus a head object replaced only by
conditional PUT; a writer that loses a race forks instead of losing data.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

# A library logs; the application decides where records go. Without a handler of its
# own, Python's last-resort handler would print s3log's warnings (forks) to stderr.
logging.getLogger("s3log").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from s3log._format.values import Entry, Head, ParentRef
    from s3log.aio import AsyncLog, AsyncWriter
    from s3log.config import LogConfig, OnConflict, RetryPolicy, Selector
    from s3log.encryption import Encryption, KmsKeyProvider, LocalKeyProvider
    from s3log.env import Env
    from s3log.errors import (
        AppendKeyReused,
        ConflictError,
        CorruptionError,
        EncryptionError,
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
        SessionShredded,
        StoreError,
        WriterBusyError,
    )
    from s3log.log import Log, Writer
    from s3log.reducer import EntriesReducer, NullReducer, Reducer
    from s3log.results import (
        AckedEntry,
        CommitResult,
        ExpireReport,
        ForkInfo,
        LineageStep,
        SessionInfo,
        SessionView,
        VerifyReport,
    )
    from s3log.store.aio_s3 import AsyncS3Store
    from s3log.store.memory import AsyncMemoryStore, MemoryStore
    from s3log.store.obstore import AsyncObstoreStore, ObstoreStore
    from s3log.store.s3 import S3Store
    from s3log.urls import open_async_log, open_log

__version__ = "0.1.0"

# Every public name is loaded when first asked for: ``import s3log`` costs next to
# nothing, so the pytest plugin (``s3log.testing.plugin``, loaded by every pytest run where
# s3log is installed) and a CLI that only prints its help pay nothing for names they do
# not use. The stores' clients (boto3, aiobotocore) and the drivers (asyncio,
# concurrent.futures) are the slow ones; cbor2 and the format follow with the first name.
_LAZY = {
    "Entry": ("s3log._format.values", "Entry"),
    "Head": ("s3log._format.values", "Head"),
    "ParentRef": ("s3log._format.values", "ParentRef"),
    "LogConfig": ("s3log.config", "LogConfig"),
    "RetryPolicy": ("s3log.config", "RetryPolicy"),
    "OnConflict": ("s3log.config", "OnConflict"),
    "Selector": ("s3log.config", "Selector"),
    "Env": ("s3log.env", "Env"),
    "AppendKeyReused": ("s3log.errors", "AppendKeyReused"),
    "ConflictError": ("s3log.errors", "ConflictError"),
    "CorruptionError": ("s3log.errors", "CorruptionError"),
    "EntryNotFound": ("s3log.errors", "EntryNotFound"),
    "EncryptionError": ("s3log.errors", "EncryptionError"),
    "SessionShredded": ("s3log.errors", "SessionShredded"),
    "Encryption": ("s3log.encryption", "Encryption"),
    "LocalKeyProvider": ("s3log.encryption", "LocalKeyProvider"),
    "KmsKeyProvider": ("s3log.encryption", "KmsKeyProvider"),
    "FormatVersionError": ("s3log.errors", "FormatVersionError"),
    "InvalidArgumentError": ("s3log.errors", "InvalidArgumentError"),
    "InvalidEntryError": ("s3log.errors", "InvalidEntryError"),
    "InvalidPrefixError": ("s3log.errors", "InvalidPrefixError"),
    "InvalidSessionIdError": ("s3log.errors", "InvalidSessionIdError"),
    "PreconditionsIgnoredError": ("s3log.errors", "PreconditionsIgnoredError"),
    "S3LogError": ("s3log.errors", "S3LogError"),
    "SessionExists": ("s3log.errors", "SessionExists"),
    "SessionExpired": ("s3log.errors", "SessionExpired"),
    "SessionNotFound": ("s3log.errors", "SessionNotFound"),
    "SessionReplaced": ("s3log.errors", "SessionReplaced"),
    "StoreError": ("s3log.errors", "StoreError"),
    "WriterBusyError": ("s3log.errors", "WriterBusyError"),
    "EntriesReducer": ("s3log.reducer", "EntriesReducer"),
    "NullReducer": ("s3log.reducer", "NullReducer"),
    "Reducer": ("s3log.reducer", "Reducer"),
    "AckedEntry": ("s3log.results", "AckedEntry"),
    "CommitResult": ("s3log.results", "CommitResult"),
    "ExpireReport": ("s3log.results", "ExpireReport"),
    "ForkInfo": ("s3log.results", "ForkInfo"),
    "LineageStep": ("s3log.results", "LineageStep"),
    "SessionInfo": ("s3log.results", "SessionInfo"),
    "SessionView": ("s3log.results", "SessionView"),
    "VerifyReport": ("s3log.results", "VerifyReport"),
    "AsyncMemoryStore": ("s3log.store.memory", "AsyncMemoryStore"),
    "MemoryStore": ("s3log.store.memory", "MemoryStore"),
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
    if not name.startswith("_"):
        # ``s3log._format.codec`` after a bare ``import s3log``, as when the package imported its
        # submodules: a submodule that exists is loaded; another name is an AttributeError.
        import importlib
        import importlib.util

        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 's3log' has no attribute {name!r}")


__all__ = [
    "AckedEntry", "AppendKeyReused", "AsyncLog", "AsyncMemoryStore", "AsyncObstoreStore", "AsyncS3Store",
    "AsyncWriter", "CommitResult",
    "ConflictError",
    "CorruptionError", "EntriesReducer", "Entry", "EntryNotFound", "ForkInfo", "FormatVersionError", "Head",
    "Env", "InvalidArgumentError", "InvalidEntryError", "InvalidPrefixError", "InvalidSessionIdError",
    "PreconditionsIgnoredError", "SignatureError", "LineageStep", "Log", "LogConfig", "MemoryStore",
    "NullReducer", "ObstoreStore", "OnConflict", "ParentRef", "Reducer", "RetryPolicy", "S3LogError", "S3Store",
    "SessionExists", "Selector", "SessionExpired", "SessionReplaced", "ExpireReport",
    "SessionInfo", "SessionNotFound", "SessionView", "StoreError", "VerifyReport", "Writer", "WriterBusyError",
    "Encryption", "EncryptionError", "KmsKeyProvider", "LocalKeyProvider", "SessionShredded",
    "open_async_log", "open_log",
]


def __dir__() -> list[str]:
    """The module's names, the lazy ones included."""
    return sorted(set(globals()) | set(__all__))
