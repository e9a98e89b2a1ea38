"""The drivers: run a protocol procedure against a store, blocking or awaited."""
