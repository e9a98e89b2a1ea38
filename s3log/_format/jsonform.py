"""One rule for turning stored values into JSON, wherever s3log prints or exports them.

``s3log show --json`` and ``tail --json``, ``s3log query`` (its JSON and its table),
the ``jsonl`` export and the analytics column ``data_json`` all use :func:`plain`:

- bytes as lowercase hex (``b"\\x01\\xab"`` gives ``"01ab"``);
- NaN, Infinity and -Infinity as ``null`` (JSON has none of them; ``null`` is what
  JavaScript's ``JSON.stringify`` and orjson write; the stored CBOR keeps them exact);
- an integer of more digits than ``str()`` converts (4,300 by default) as its
  ``hex()`` text, ``"0x..."``;
- map keys as text: bytes as hex, an array as its JSON, anything else ``str()``;
- tuples and sets as arrays, datetimes as ISO 8601 (``datetime.isoformat``), anything
  else JSON cannot hold as its ``str()``.

No third-party import: the command line loads this without pyarrow.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

__all__ = ["dumps", "key", "plain", "text"]

#: Below this many bits an integer always has fewer digits than ``str()``'s default limit.
_SAFE_INT_BITS = 14_000


def text(value: Any) -> str:
    """``str(value)``; an integer of more digits than ``str()`` converts
    (``sys.get_int_max_str_digits()``, 4,300 by default) as ``hex()``, which has no limit."""
    try:
        return str(value)
    except ValueError:
        if isinstance(value, int):
            return hex(value)
        raise


def key(k: Any) -> str:
    """A map key as JSON's text key: bytes as hex, an array as its JSON, anything else ``str()``."""
    if isinstance(k, str):
        return k
    if isinstance(k, bytes | bytearray | memoryview):
        return bytes(k).hex()
    if isinstance(k, list | tuple):
        return json.dumps(plain(k))
    return text(k)


def plain(value: Any) -> Any:
    """``value`` made of what JSON holds, by the rule of this module."""
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        if value.bit_length() < _SAFE_INT_BITS:
            return value
        try:
            str(value)  # JSON writes a number with str(): more digits than it converts are hex
        except ValueError:
            return hex(value)
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, datetime):
        return value.isoformat()
    return text(value)


def dumps(value: Any, *, indent: int | None = None) -> str:
    """``value`` as JSON text by :func:`plain` (non-ASCII kept as it is)."""
    return json.dumps(plain(value), indent=indent, ensure_ascii=False, allow_nan=False)
