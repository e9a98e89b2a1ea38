"""The manifest: which segments make up a chain, and when to merge them.

A head lists its segments in chain order, each with a *level*. A segment written by a
commit is level 0. When a new segment would leave ``fanout`` segments of the same
level at the end of the manifest, they are merged with it into one segment of the
next level, and that may cascade. Levels never increase towards the end of the
manifest, each level holds fewer than ``fanout`` segments, so a manifest over ``n``
segment writes has at most ``(fanout - 1) * (log_fanout(n) + 1)`` entries, and each
entry is rewritten at most ``log_fanout(n)`` times.

Merging is done *inside* the commit that writes the new segment: that commit writes
one merged segment instead of a level-0 one, and swaps the keys in the head under the
same If-Match. A commit never writes more than one segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from s3log._format.layout import parse_segment_key
from s3log._format.values import Head


@dataclass(frozen=True, slots=True)
class MergePlan:
    """Merge the last ``take`` segments of the manifest with the new one, at ``level``."""

    take: int
    level: int


def plan_merge(levels: Sequence[int], fanout: int) -> MergePlan:
    """Decide how many trailing segments merge with a new level-0 segment."""
    if fanout < 2:
        raise ValueError("fanout must be at least 2")
    end = len(levels)
    take = 0
    level = 0
    while True:
        run = 0
        while end - run - 1 >= 0 and levels[end - run - 1] == level:
            run += 1
        if run + 1 < fanout:
            return MergePlan(take, level)
        take += run
        end -= run
        level += 1


def segment_ranges(head: Head) -> list[tuple[str, int, int]]:
    """``(key, first_seq, last_seq)`` of every segment of the head, in order."""
    out: list[tuple[str, int, int]] = []
    firsts = []
    for key in head.segments:
        parsed = parse_segment_key(key)
        firsts.append(parsed[0] if parsed else -1)
    ends = [*firsts[1:], head.tail_first_seq] if firsts else []
    for key, first, nxt in zip(head.segments, firsts, ends, strict=True):
        out.append((key, first, nxt - 1))
    return out


def segments_for_range(head: Head, lo: int, hi: int) -> list[str]:
    """The keys of the segments holding any entry with ``lo <= seq <= hi``."""
    return [key for key, first, last in segment_ranges(head) if first <= hi and last >= lo]


def max_manifest_length(segment_writes: int, fanout: int) -> int:
    """The most segments a manifest can list after ``segment_writes`` segment writes."""
    levels = 1
    n = fanout
    while n <= segment_writes:
        levels += 1
        n *= fanout
    return (fanout - 1) * levels
