"""Object stores: the interface and its implementations."""

from s3log.store.base import AsyncObjectStore, ObjectStore, RequestCounter
from s3log.store.memory import AsyncMemoryStore, MemoryStore

__all__ = ["AsyncMemoryStore", "AsyncObjectStore", "MemoryStore", "ObjectStore", "RequestCounter"]
