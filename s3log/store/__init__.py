"""Object stores: the interface and its implementations."""

from .base import AsyncObjectStore, ObjectStore, RequestCounter
from .memory import AsyncMemoryStore, MemoryStore

__all__ = ["AsyncMemoryStore", "AsyncObjectStore", "MemoryStore", "ObjectStore", "RequestCounter"]
