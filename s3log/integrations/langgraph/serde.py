"""What the LangGraph savers deserialize: data, never code.

By default the savers read with LangGraph's ``JsonPlusSerializer`` in its strict mode,
which rebuilds only LangGraph's own safe types plus the types named in
``allowed_types``; a serializer that would import and call whatever stored data names
is refused at construction, and a stored value in a format the savers never write is
refused on read (:class:`UnsafePayloadError`).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Any

from s3log._extras import extra
from s3log.errors import S3LogError
from s3log.integrations import IntegrationError

with extra("langgraph"):
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

__all__ = ["AllowedType", "UnsafePayloadError", "strict_serializer"]

#: A type the serializer may rebuild: the class itself, or ``(module, name)``.
AllowedType = tuple[str, str] | type

# The serialization formats JsonPlusSerializer writes without pickle_fallback. Any other
# tag in stored data was not written by a saver using it: "pickle" runs code by design,
# and "json" goes through langchain's constructor revival.
_PLAIN_TAGS = frozenset({"null", "bytes", "bytearray", "msgpack"})


class UnsafePayloadError(S3LogError):
    """A stored checkpoint value is in a format the saver refuses to load, because
    loading it could import or run code (or it is not a serialized value at all)."""


def _allowlist(allowed_types: Iterable[AllowedType]) -> builtins.list[tuple[str, str]]:
    if isinstance(allowed_types, (str, bytes)) or not isinstance(allowed_types, Iterable):
        raise IntegrationError(f"allowed_types must be a list of classes or (module, name) pairs, "
                               f"got {allowed_types!r}")
    out: builtins.list[tuple[str, str]] = []
    for item in allowed_types:
        if isinstance(item, type):
            # The serializer records obj.__class__.__module__ and __name__: match those.
            out.append((item.__module__, item.__name__))
        elif (isinstance(item, tuple) and len(item) == 2
              and all(isinstance(part, str) and part for part in item)):
            out.append((item[0], item[1]))
        else:
            raise IntegrationError(f"allowed_types: {item!r} is neither a class nor a (module, name) "
                                   f"pair of non-empty strings, e.g. ('myapp.models', 'Order')")
    return out


def strict_serializer(allowed_types: Iterable[AllowedType] = ()) -> JsonPlusSerializer:
    """LangGraph's ``JsonPlusSerializer`` in strict mode: on read it rebuilds only
    LangGraph's built-in safe types and ``allowed_types``; a value naming any other
    type or callable comes back as its stored argument data, and nothing is imported.

    This is the savers' default; use it to build your own (e.g. inside an
    ``EncryptedSerializer``).
    """
    allowed = _allowlist(allowed_types)
    # None means "the built-in safe types only" (the strict mode of the serializer).
    return JsonPlusSerializer(allowed_msgpack_modules=allowed or None)


def refuse_permissive(serde: Any, where: str = "serializer") -> None:
    """Refuse a serializer that would import and call whatever stored data names."""
    if isinstance(serde, EncryptedSerializer):
        # EncryptedSerializer hands values without a cipher tag straight to its inner
        # serializer, so a planted plaintext value meets the inner one's rules.
        refuse_permissive(serde.serde, "serializer inside the EncryptedSerializer")
    elif isinstance(serde, JsonPlusSerializer):
        # Read with a default that refuses, so a renamed attribute fails closed.
        if getattr(serde, "_allowed_msgpack_modules", True) is True:
            raise IntegrationError(
                f"the {where} is a JsonPlusSerializer in its permissive mode, which imports and calls "
                "any callable a stored checkpoint names; use strict_serializer([...]) or "
                "JsonPlusSerializer(allowed_msgpack_modules=[...] or None)")
        if getattr(serde, "pickle_fallback", True):
            raise IntegrationError(f"the {where} has pickle_fallback=True: unpickling stored data runs "
                                   "code; use strict_serializer([...])")


def tag_allowed(serde: Any, tag: str) -> bool:
    """Whether a stored value in format ``tag`` may be handed to ``serde``."""
    if isinstance(serde, EncryptedSerializer):
        return tag_allowed(serde.serde, tag.split("+", 1)[0])
    if isinstance(serde, JsonPlusSerializer):
        return tag in _PLAIN_TAGS
    return True  # a serializer of the caller's own: its formats are its business
