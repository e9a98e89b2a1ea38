"""Commands that look at and change sessions: ls, show, tail, verify, fork, lineage, rm."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import typer
from rich.progress import track
from rich.table import Table
from rich.tree import Tree

from ..errors import CorruptionError, S3LogError
from .app import app, console, emit_json, fail, handle_errors, open_log


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _entry_row(e: Any) -> dict[str, Any]:
    return {"seq": e.seq, "kind": e.kind, "ts": e.ts, "hash": e.hash.hex(), "data": e.data}


@app.command("ls")
@handle_errors
def ls(
    limit: int = typer.Option(50, "--limit", help="Show at most this many sessions (0: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List sessions, newest first."""
    log = open_log()
    infos = list(log.list_sessions(limit=limit or None))
    if as_json:
        emit_json([
            {"session": i.session_id, "entries": i.entries, "version": i.version, "created_at": i.created_at,
             "updated_at": i.updated_at, "parent": i.parent.session if i.parent else None}
            for i in infos
        ])
        return
    table = Table("session", "entries", "created", "updated", "parent")
    for i in infos:
        table.add_row(i.session_id, str(i.entries), _when(i.created_at), _when(i.updated_at),
                      i.parent.session if i.parent else "")
    console.print(table)


@app.command()
@handle_errors
def show(session: str, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show a session's verified entries."""
    view = open_log().read(session)
    if as_json:
        emit_json({"session": view.session_id, "meta": view.meta,
                   "parent": view.parent.to_map() if view.parent else None,
                   "entries": [_entry_row(e) for e in view.entries]})
        return
    console.print(f"[bold]{view.session_id}[/bold]  entries={len(view)}  version={view.head.version}")
    if view.parent:
        console.print(f"forked from {view.parent.session} at seq {view.parent.seq} ({view.parent.reason})")
    for e in view.entries:
        console.print(f"{e.seq:>6}  {_when(e.ts)}  [cyan]{e.kind}[/cyan]  {e.data!r}"[:400], highlight=False)


@app.command()
@handle_errors
def tail(
    session: str,
    n: int = typer.Option(10, "-n", help="How many of the last entries."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new entries."),
    interval: float = typer.Option(1.0, "--interval", help="Seconds between polls with --follow."),
) -> None:
    """Print the last entries of a session (and follow it)."""
    log = open_log()
    view = log.read(session)
    for e in view.entries[-n:]:
        console.print(f"{e.seq:>6}  [cyan]{e.kind}[/cyan]  {e.data!r}"[:400], highlight=False)
    last = view.head.seq
    while follow:
        time.sleep(interval)
        head = log.head(session)
        if head.seq > last:
            for e in log.read(session).entries[last + 1 :]:
                console.print(f"{e.seq:>6}  [cyan]{e.kind}[/cyan]  {e.data!r}"[:400], highlight=False)
            last = head.seq


@app.command()
@handle_errors
def verify(
    session: str = typer.Argument(None, help="The session to verify."),
    all_: bool = typer.Option(False, "--all", help="Verify every session."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Verify chains: hashes, links, seqs and heads. Exits 1 on any broken chain."""
    log = open_log()
    if not session and not all_:
        fail("give a SESSION or --all")
    ids = log.list_session_ids() if all_ else [session]
    bad: list[dict[str, Any]] = []
    good = 0
    for sid in track(ids, description="verifying", console=console, disable=len(ids) < 5 or as_json):
        try:
            log.verify(sid)
            good += 1
        except CorruptionError as exc:
            bad.append({"session": sid, "key": exc.key, "seq": exc.seq, "error": str(exc)})
        except S3LogError as exc:
            bad.append({"session": sid, "key": None, "seq": None, "error": str(exc)})
    if as_json:
        emit_json({"verified": good, "broken": bad})
    else:
        for b in bad:
            console.print(f"[red]BROKEN[/red] {b['error']}", highlight=False)
        console.print(f"{good} verified, {len(bad)} broken")
    if bad:
        raise typer.Exit(1)


@app.command()
@handle_errors
def fork(
    session: str,
    at_seq: int = typer.Option(None, "--at-seq", help="Fork after this seq."),
    at_hash: str = typer.Option(None, "--at-hash", help="Fork after the entry with this hash."),
) -> None:
    """Fork a session at a committed entry (the latest by default); prints the new id."""
    console.print(open_log().fork(session, at_seq=at_seq, at_hash=at_hash))


@app.command()
@handle_errors
def lineage(
    session: str,
    fmt: str = typer.Option("tree", "--format", help="tree, mermaid or dot."),
) -> None:
    """Show a session's family: its ancestors and everything forked from them."""
    log = open_log()
    steps = log.lineage(session)
    root = steps[-1].session
    edges: list[tuple[str, str, str]] = []

    def collect(sid: str) -> None:
        for child in sorted(log.children(sid)):
            edges.append((sid, child, ""))
            collect(child)

    collect(root)
    if fmt == "mermaid":
        console.print("graph TD")
        for a, b, _ in edges:
            console.print(f'  s{a.replace("-", "")}["{a}"] --> s{b.replace("-", "")}["{b}"]', highlight=False)
        return
    if fmt == "dot":
        console.print("digraph lineage {")
        for a, b, _ in edges:
            console.print(f'  "{a}" -> "{b}";', highlight=False)
        console.print("}")
        return
    if fmt != "tree":
        fail(f"unknown format {fmt!r}: use tree, mermaid or dot")
    tree = Tree(root)
    nodes = {root: tree}
    for a, b, _ in edges:
        label = f"[bold]{b}[/bold]" if b == session else b
        nodes[b] = nodes[a].add(label)
    console.print(tree)


@app.command("rm")
@handle_errors
def rm(session: str) -> None:
    """Delete a session: its head first, then its segments and fork markers."""
    n = open_log().delete(session)
    console.print(f"deleted {session} ({n} objects)")
