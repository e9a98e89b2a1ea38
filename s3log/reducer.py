"""Reducers: how a writer's state is rebuilt by folding entries, and seeded into forks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from s3log._format.values import FORK_KIND, Entry

if TYPE_CHECKING:
    # A default (PEP 696) lets a bare ``Writer`` or ``Reducer`` mean ``Writer[Any]``
    # under ``mypy --strict``; typing_extensions is only needed by the type checker.
    from typing_extensions import TypeVar

    #: The state a reducer folds entries into (``Any`` when not given).
    S = TypeVar("S", default=Any)
else:
    from typing import TypeVar

    S = TypeVar("S")


class Reducer(Protocol[S]):
    """Folds entries into a state; turns a state into a fork seed and back.

    ``apply`` may mutate and return the state it is given: states are owned by the
    writer that folds them. ``to_seed`` must return plain CBOR-able data.

    ``apply`` must not raise. A commit folds its entries once their head has landed,
    and every reader of the session folds them again: an entry a reducer refuses is
    stored all the same, and the writer (and any ``open`` with that reducer) then
    fails on it each time. Check what is appended before appending it.
    """

    def initial(self) -> S:
        """The state of an empty session."""
        ...

    def apply(self, state: S, entry: Entry) -> S:
        """The state after ``entry``."""
        ...

    def to_seed(self, state: S) -> Any:
        """The seed a fork of this state starts from (CBOR-able)."""
        ...

    def from_seed(self, seed: Any) -> S:
        """The state a fork starts in, from its seed."""
        ...


# A reducer may also define ``fork_meta(meta, parent, seed) -> meta``: the header of a
# fork made from its state, given the parent's header and the ParentRef. Without it a
# fork keeps its parent's header unchanged.
#
# A reducer may also define ``restarts(entry) -> bool``: True for an entry whose state
# does not depend on any entry before it (``apply(anything, entry)`` gives the same
# state as the whole fold up to it, such as an agent session's summary). ``open`` then
# reads the chain backwards only to the newest such entry and folds from there, so
# opening costs what follows that entry, not the whole history. It must not raise.


class EntriesReducer:
    """The default reducer: the state is the logical history, entry maps in order.

    A fork's seed is that whole history, so a fork is self-contained: reading it alone
    gives back everything its parent chain held, ancestors' entries included.
    """

    def initial(self) -> list[dict[str, Any]]:
        """An empty history."""
        return []

    def apply(self, state: list[dict[str, Any]], entry: Entry) -> list[dict[str, Any]]:
        """Append the entry's map."""
        state.append(entry.to_map())
        return state

    def to_seed(self, state: list[dict[str, Any]]) -> Any:
        """The history itself."""
        return list(state)

    def from_seed(self, seed: Any) -> list[dict[str, Any]]:
        """A copy of the seeded history."""
        return list(seed or [])


class NullReducer:
    """Keeps no state: forks carry only the parent pointer, not a seed.

    For writers of long sessions that do not want the history in memory; the
    inherited entries stay readable in the parent session through ``lineage``.
    """

    def initial(self) -> None:
        """No state."""
        return None

    def apply(self, state: None, entry: Entry) -> None:
        """No state."""
        return None

    def to_seed(self, state: None) -> Any:
        """No seed."""
        return None

    def from_seed(self, seed: Any) -> None:
        """No state."""
        return None


def fold(reducer: Reducer[S], state: S, entries: Iterable[Entry]) -> S:
    """Continue folding ``entries`` into ``state``.

    A session's first entry, when it is an ``s3log.fork`` entry, resets the state to
    the one seeded from its parent: that is what makes a fork carry its parent's state.
    """
    for e in entries:
        if e.seq == 0 and e.kind == FORK_KIND:
            seed = e.data.get("seed") if isinstance(e.data, dict) else None
            state = reducer.from_seed(seed)
        else:
            state = reducer.apply(state, e)
    return state


def replay(reducer: Reducer[S], entries: Iterable[Entry]) -> S:
    """The state after folding ``entries`` from the reducer's initial state."""
    return fold(reducer, reducer.initial(), entries)
