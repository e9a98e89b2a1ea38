"""The format: bytes to values and back. Pure functions; no I/O, no clock.

``values`` (entries, heads and what a head holds), ``cbor`` (the deterministic CBOR
primitives), ``entries`` (an entry's record and the checks of ``append``'s input),
``records`` (v2 records read back), ``columns`` (verified runs as columns), ``codec``
(whole segments and heads, formats v1 and v2), ``chain`` (hash chains), ``manifest``
(levelled merging), ``layout`` (keys under a prefix), ``ids`` (session ids), ``times``
(instants and durations as milliseconds) and ``jsonform`` (stored values as JSON).
"""
