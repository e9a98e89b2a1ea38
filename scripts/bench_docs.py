"""Write the targets of a ``scripts/bench.py`` run into docs/benchmarks.md.

``make bench`` passes ``--docs docs/benchmarks.md``: the table of targets of that run
(each with ✔ or ✘, the figure and the bound) replaces the block between the two
markers below, so the document always carries the latest full run beside the
hand-written sections that explain the figures. A file without the markers gets the
block inserted before its first ``## `` section. A run with the latency-model part also
writes its table of acknowledgement latencies into the block marked ``latency-peers``
(:func:`write_block`).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

BEGIN = "<!-- bench:targets:begin (written by `make bench`: do not edit by hand) -->"
END = "<!-- bench:targets:end -->"


def _cell(text: object) -> str:
    # A table cell: a pipe would end the cell, a newline the row.
    return str(text).replace("|", "\\|").replace("\n", " ")


def _mark(ok: object) -> str:
    return "·" if ok is None else "✔" if ok else "✘"


def targets_block(results: dict[str, Any], now: _dt.datetime | None = None) -> str:
    """The Markdown block (markers included) for ``results`` (what bench.py writes to
    bench-results.json: ``machine``, ``parts``, ``targets``)."""
    when = (now or _dt.datetime.now(_dt.UTC)).strftime("%Y-%m-%d %H:%M UTC")
    m = results.get("machine", {})
    targets = results.get("targets", [])
    met = sum(1 for t in targets if t.get("ok"))
    bounded = sum(1 for t in targets if t.get("ok") is not None)
    lines = [
        BEGIN,
        "## The latest `make bench`",
        "",
        f"Run on {when}: Python {_cell(m.get('python', '?'))}, {_cell(m.get('platform', '?'))}, "
        f"{_cell(m.get('cpus', '?'))} CPUs; parts: {_cell(', '.join(results.get('parts', [])) or '-')}. "
        f"{met} of {bounded} targets met ({len(targets) - bounded} rows informational, marked ·). Figures from "
        "one run on a shared machine: compare ratios, not times, and see the sections below for runs measured "
        "alternately.",
        "",
        "| | measure | figure | target |",
        "|---|---|---|---|",
    ]
    lines += [f"| {_mark(t.get('ok'))} | {_cell(t['measure'])} | {_cell(t['shown'])} | {_cell(t['target'])} |"
              for t in targets]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_targets(path: str | Path, results: dict[str, Any], now: _dt.datetime | None = None) -> None:
    """Put :func:`targets_block` into the Markdown file ``path``, in place of the block
    already there, or before its first ``## `` section (at the end if it has none)."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    block = targets_block(results, now)
    start, end = text.find(BEGIN), text.find(END)
    if start >= 0 and end > start:
        after = end + len(END)
        if text[after:after + 1] == "\n":
            after += 1
        text = text[:start] + block + text[after:]
    elif start >= 0 or end >= 0:
        raise ValueError(f"{p}: one bench marker without the other; fix the file by hand")
    else:
        at = text.find("\n## ")
        text = text + "\n" + block if at < 0 else text[: at + 1] + block + "\n" + text[at + 1:]
    p.write_text(text, encoding="utf-8")


def write_block(path: str | Path, name: str, body: str) -> None:
    """Put ``body`` between the markers ``<!-- bench:NAME:begin -->`` and
    ``<!-- bench:NAME:end -->`` of the Markdown file ``path``, which must hold both
    (a hand-written section places them)."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{p}: no {begin} ... {end} block; add the markers by hand")
    p.write_text(text[: start + len(begin)] + "\n" + body + text[stop:], encoding="utf-8")
