"""The format: bytes to values and back. Pure functions; no I/O, no clock.

``codec`` (CBOR heads, segments, records), ``chain`` (hash chains), ``manifest``
(levelled merging), ``layout`` (keys under a prefix), ``ids`` (session ids), ``times``
(instants and durations as milliseconds) and ``jsonform`` (stored values as JSON).
"""
