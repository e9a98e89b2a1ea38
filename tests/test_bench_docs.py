"""``make bench`` writes its targets into docs/benchmarks.md (scripts/bench_docs.py):
the marked block is replaced, the hand-written rest is kept, and the block in the
repository's own docs/benchmarks.md is well formed."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parent.parent


def _bench_docs() -> ModuleType:
    return load_script("bench_docs")


RESULTS = {
    "machine": {"python": "3.11.7", "platform": "Linux", "cpus": 2},
    "parts": ["cpu", "restore"],
    "targets": [
        {"measure": "restore | local", "shown": "2.0x", "target": "<= 3x", "ok": True},
        {"measure": "scan", "shown": "200,000/s", "target": ">= 250,000/s", "ok": False},
    ],
}
WHEN = dt.datetime(2026, 11, 30, 20, 0, tzinfo=dt.UTC)


def test_the_block_goes_before_the_first_section_then_replaces_itself(tmp_path: Path) -> None:
    bd = _bench_docs()
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nIntro.\n\n## By hand\n\nKept.\n", encoding="utf-8")
    bd.write_targets(doc, RESULTS, WHEN)
    first = doc.read_text(encoding="utf-8")
    assert first.index("Intro.") < first.index(bd.BEGIN) < first.index(bd.END) < first.index("## By hand")
    assert "| ✔ | restore \\| local | 2.0x | <= 3x |" in first
    assert "| ✘ | scan | 200,000/s | >= 250,000/s |" in first
    assert "2026-11-30 20:00 UTC" in first and "1 of 2 targets met" in first and "parts: cpu, restore" in first
    # A second run replaces the block: one block, the rest unchanged.
    later = {**RESULTS, "targets": RESULTS["targets"][:1]}
    bd.write_targets(doc, later, WHEN)
    second = doc.read_text(encoding="utf-8")
    assert second.count(bd.BEGIN) == 1 and second.count(bd.END) == 1
    assert "| ✘ | scan" not in second and "1 of 1 targets met" in second
    assert second.replace(bd.targets_block(later, WHEN), "") == first.replace(bd.targets_block(RESULTS, WHEN), "")


def test_a_file_with_one_marker_is_refused_untouched(tmp_path: Path) -> None:
    bd = _bench_docs()
    doc = tmp_path / "benchmarks.md"
    text = f"# B\n\n{bd.BEGIN}\n| x |\n\n## S\n"
    doc.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match="one bench marker"):
        bd.write_targets(doc, RESULTS, WHEN)
    assert doc.read_text(encoding="utf-8") == text


def test_the_repository_docs_carry_one_block_of_targets() -> None:
    bd = _bench_docs()
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert text.count(bd.BEGIN) == 1 and text.count(bd.END) == 1
    block = text[text.index(bd.BEGIN) : text.index(bd.END)]
    rows = [line for line in block.splitlines() if line.startswith(("| ✔ |", "| ✘ |", "| · |"))]
    assert rows, "the block holds the targets of a run"
    assert all(line.count(" | ") >= 3 for line in rows)


def test_the_scan_benchmark_writes_sessions_of_a_head_and_a_segment() -> None:
    """Its sessions are a head and at least one segment (two dependent round trips to
    read), as scripts/bench_scan.py says: decision 0033 had made most of them their
    head alone, so the sequential loop it is compared with did a third of its GETs."""
    pytest.importorskip("pyarrow")
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bench_scan
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    import s3log

    store = s3log.MemoryStore()
    bench_scan.generate(store, 4, 100)  # type: ignore[arg-type]
    log = s3log.Log(store)
    heads = [log.head(info.session_id) for info in log.list_sessions()]
    assert len(heads) == 4
    assert all(h.segments for h in heads)


def _bench() -> ModuleType:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bench
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return bench


def test_the_paired_split_counts_puts_in_flight_together_once() -> None:
    """scripts/bench.py splits a commit's time into its PUTs and the rest: a segment PUT
    beside the head (from the driver's pool) overlaps the head's and is not added twice."""
    import threading
    from types import SimpleNamespace

    both_in = threading.Barrier(2)

    def put(*args: object, **kwargs: object) -> str:
        both_in.wait(timeout=10)  # two calls: both in flight at once
        return "etag"

    store = SimpleNamespace(put_if_match=put, put_if_absent=put)
    spent = _bench()._time_writes(store)
    threads = [threading.Thread(target=store.put_if_match, args=("h", b"", "e")),
               threading.Thread(target=store.put_if_absent, kwargs={"key": "s", "body": b""})]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(spent) == 1  # one span for the two overlapping PUTs
    spent.clear()
    store2 = SimpleNamespace(put_if_match=lambda *a: "e", put_if_absent=lambda *a: "e")
    spent2 = _bench()._time_writes(store2)
    store2.put_if_match("h", b"", "e")
    store2.put_if_absent("s", b"")
    assert len(spent2) == 2  # one after the other: two spans


def test_a_named_block_is_replaced_between_its_markers(tmp_path: Path) -> None:
    """The latency-model run writes its table of acknowledgement latencies between
    markers a hand-written section places; a file without them is refused untouched."""
    bd = _bench_docs()
    doc = tmp_path / "benchmarks.md"
    text = "# B\n\nBefore.\n<!-- bench:latency-peers:begin -->\nold\n<!-- bench:latency-peers:end -->\n\nAfter.\n"
    doc.write_text(text, encoding="utf-8")
    bd.write_block(doc, "latency-peers", "| a | b |\n")
    assert doc.read_text(encoding="utf-8") == text.replace("\nold\n", "\n| a | b |\n")
    bd.write_block(doc, "latency-peers", "| c |\n")
    assert doc.read_text(encoding="utf-8").count("| c |") == 1 and "| a | b |" not in doc.read_text(encoding="utf-8")
    bare = tmp_path / "bare.md"
    bare.write_text("# B\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no <!-- bench:latency-peers:begin -->"):
        bd.write_block(bare, "latency-peers", "x\n")
    assert bare.read_text(encoding="utf-8") == "# B\n"


def test_informational_rows_are_marked_and_not_counted_as_targets() -> None:
    bd = _bench_docs()
    results = {**RESULTS, "targets": [*RESULTS["targets"],
                                      {"measure": "local", "shown": "1.2x", "target": "informational", "ok": None}]}
    block = bd.targets_block(results, WHEN)
    assert "| · | local | 1.2x | informational |" in block
    assert "1 of 2 targets met (1 rows informational" in block


def test_the_repository_docs_carry_the_published_and_measured_latencies() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    begin, end = "<!-- bench:latency-peers:begin -->", "<!-- bench:latency-peers:end -->"
    assert text.count(begin) == 1 and text.count(end) == 1
    block = text[text.index(begin) : text.index(end)]
    assert "S2" in block and "WarpStream" in block and "s3log / obstore" in block
