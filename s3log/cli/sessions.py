"""Commands that look at and change sessions: ls, show, tail, verify, fork, lineage, rm."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum
from typing import Any

import typer
from rich.progress import track
from rich.text import Text
from rich.tree import Tree

from s3log.cli.app import app
from s3log.cli.common import (
    TTY_DATA_CHARS,
    command_log,
    console,
    dumps,
    echo,
    emit_json,
    fail,
    handle_errors,
    is_tty,
    print_table,
    settings,
    styled,
    verifier_for,
    when,
    when_short,
)
from s3log.errors import CorruptionError, S3LogError, SessionNotFound
from s3log.log import Log


def session_arg(value: str | None) -> str | None:
    """A SESSION argument, checked before any request: a malformed id is a usage error (exit 2)."""
    from s3log._format.ids import validate_session_id
    from s3log.errors import InvalidSessionIdError

    if value is None:
        return None
    try:
        return validate_session_id(value)
    except InvalidSessionIdError as exc:
        raise typer.BadParameter(str(exc), param_hint="SESSION") from None


_SESSION = typer.Argument(..., metavar="SESSION", help="The session id.", show_default=False, callback=session_arg)
_JSON = typer.Option(False, "--json", help="Print JSON.")


def _entry_row(e: Any) -> dict[str, Any]:
    return {"seq": e.seq, "kind": e.kind, "ts": e.ts, "time": when(e.ts), "hash": e.hash.hex(), "data": e.data}


def _entry_line(e: Any, *, tty: bool) -> Text:
    """``   seq  time  kind  data-as-JSON``; the data is cut only on a terminal."""
    data = dumps(e.data)
    if tty and len(data) > TTY_DATA_CHARS:
        data = data[: TTY_DATA_CHARS - 1] + "…"
    return styled(f"{e.seq:>6}  {when(e.ts)}  ", (e.kind, "cyan"), "  ", data)


#: Sessions ``ls`` shows on a terminal when not told how many (piped or --json: all of them).
TTY_MAX_ITEMS = 50


def _session_token(value: str | None) -> str | None:
    """``--starting-token``: a session id (the one a cut listing named), checked before any request."""
    try:
        return session_arg(value)
    except typer.BadParameter as exc:
        raise typer.BadParameter(f"not a continuation token: {exc.message}") from None


def caller_text(session_id: str, meta: dict[str, Any]) -> str:
    """The caller's own id of an integration's session, as ``ls`` prints it ("" if none or the same).

    A LangGraph namespace other than the root follows the thread id as ``ns=NAMESPACE``;
    text that is not printable is quoted as JSON, so a piped row stays one line.
    """
    from s3log.integrations import caller_id

    found = caller_id(meta)
    if found is None:
        return ""
    text = found.get("session_id") or found["thread_id"]
    if found.get("checkpoint_ns"):
        text = f"{text} ns={found['checkpoint_ns']}"
    if text == session_id:
        return ""
    return text if text.isprintable() else dumps(text)


@app.command("ls")
@handle_errors
def ls(
    ctx: typer.Context,
    max_items: int | None = typer.Option(
        None, "--max-items", metavar="N", min=0, show_default=False,
        help=f"List at most N sessions (0: all). Default: all when piped or with --json, "
             f"{TTY_MAX_ITEMS} on a terminal. A cut listing says on stderr how to go on."),
    starting_token: str | None = typer.Option(
        None, "--starting-token", metavar="TOKEN", callback=_session_token,
        help="Continue a cut listing: the token it printed on stderr (the last session it showed)."),
    label: list[str] = typer.Option(None, "--label", metavar="NAME=VALUE",
                                    help="Only sessions with this label (repeatable; reads each head)."),
    as_json: bool = _JSON,
) -> None:
    """List sessions, newest first, and the caller's own id of an integration's sessions.

    Piped or with --json every session is listed; on a terminal the first 50. A cut
    listing (--max-items, or a terminal's 50) ends with a line on stderr naming the
    --starting-token to go on from, as 'aws s3api' does. --max-items N costs a few
    LISTs, not one per 1,000 sessions.
    """
    from s3log.cli.maintenance import parse_labels

    labels = parse_labels(label)
    if max_items is None:
        max_items = TTY_MAX_ITEMS if is_tty() and not as_json else 0
    with command_log(ctx) as log:
        # One more than shown: a listing is said to be cut only when it is.
        infos = list(log.list_sessions(limit=max_items + 1 if max_items else None, labels=labels,
                                       after=starting_token))
    more = bool(max_items) and len(infos) > max_items
    infos = infos[:max_items] if more else infos
    callers = [caller_text(i.session_id, i.meta) for i in infos]
    if as_json:
        from s3log.integrations import caller_id

        emit_json([
            {"session": i.session_id, "entries": i.entries, "version": i.version, "created_at": i.created_at,
             "updated_at": i.updated_at, "created": when(i.created_at), "updated": when(i.updated_at),
             "parent": i.parent.session if i.parent else None, "caller": caller_id(i.meta)}
            for i in infos
        ])
    else:
        header = ["session", "entries", "created", "updated", "parent"]
        rows = [[i.session_id, str(i.entries), when(i.created_at), when(i.updated_at),
                 i.parent.session if i.parent else ""] for i in infos]
        short = [[r[0], r[1], when_short(i.created_at), when_short(i.updated_at), r[4]]
                 for r, i in zip(rows, infos, strict=True)]
        if any(callers):  # the caller's id, free text: last, and only when there is one
            header.append("caller")
            for r, t, c in zip(rows, short, callers, strict=True):
                r.append(c)
                t.append(c)
        # Ids are copied from here: the session column is folded only when nothing else fits.
        print_table(header, rows, keep_whole=(0,), tty_rows=short, right=(1,))
    if more:
        echo(f"listed {max_items} sessions; more follow: s3log ls --max-items {max_items} "
             f"--starting-token {infos[-1].session_id}", err=True)


@app.command()
@handle_errors
def show(ctx: typer.Context, session: str = _SESSION, as_json: bool = _JSON) -> None:
    """Show a session's verified entries: seq, time, kind and data as JSON.

    JSON here, in --json, 'tail', 'query' and the jsonl export follows one rule: bytes as
    hex, NaN and infinities as null, times as ISO 8601 UTC (2026-11-30T09:40:00.123Z).
    """
    with command_log(ctx) as log:
        view = log.read(session)
    if as_json:
        emit_json({"session": view.session_id, "meta": view.meta,
                   "parent": view.parent.to_map() if view.parent else None,
                   "entries": [_entry_row(e) for e in view.entries]})
        return
    echo(styled((view.session_id, "bold"), f"  entries={len(view)}  version={view.head.version}"))
    if view.meta:
        echo(f"meta: {dumps(view.meta)}")
    if view.parent:
        echo(f"forked from {view.parent.session} at seq {view.parent.seq} ({view.parent.reason})")
    tty = is_tty()
    for e in view.entries:
        echo(_entry_line(e, tty=tty))


@app.command()
@handle_errors
def tail(
    ctx: typer.Context,
    session: str = _SESSION,
    n: int = typer.Option(10, "-n", metavar="N", min=0, help="How many of the last entries."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new entries (Ctrl-C stops)."),
    interval: float = typer.Option(1.0, "--interval", metavar="SECONDS", min=0.05,
                                   help="Seconds between polls with --follow."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per entry (JSON Lines)."),
) -> None:
    """Print the last entries of a session (and follow it)."""
    tty = is_tty()

    def out(e: Any) -> None:
        echo(dumps(_entry_row(e)) if as_json else _entry_line(e, tty=tty))

    with command_log(ctx) as log:
        view = log.read(session)
        for e in view.entries[len(view.entries) - n :]:
            out(e)
        last = view.head.seq
        try:
            while follow:
                time.sleep(interval)
                head = log.head(session)
                if head.seq > last:
                    for e in log.read(session).entries[last + 1 :]:
                        out(e)
                    last = head.seq
        except KeyboardInterrupt:
            return


@app.command()
@handle_errors
def verify(
    ctx: typer.Context,
    session: str = typer.Argument(None, metavar="[SESSION]", help="The session to verify.", show_default=False,
                                  callback=session_arg),
    all_: bool = typer.Option(False, "--all", help="Verify every session."),
    public_keys: list[str] = typer.Option(
        None, "--public-key", metavar="FILE|KEY_ID=FILE",
        help="Require heads signed by this PEM public key (repeatable; KEY_ID= for a key exported from KMS)."),
    kms_key_ids: list[str] = typer.Option(
        None, "--kms-key-id", metavar="ID", help="Require heads signed by this KMS key (repeatable; kms:Verify)."),
    as_json: bool = _JSON,
) -> None:
    """Verify chains: hashes, links, seqs and heads (and head signatures). Exits 1 on any broken chain."""
    if not session and not all_:
        fail("give a SESSION or --all", 2)
    # This command's keys, and any given to s3log itself (which open_log already trusts).
    s = settings(ctx)
    verifier = None
    if public_keys or kms_key_ids:
        verifier = verifier_for(s, [*s.public_keys, *(public_keys or [])], [*s.kms_key_ids, *(kms_key_ids or [])])
    with command_log(ctx) as plain:
        log = plain if verifier is None else Log(plain.store, prefix=plain.prefix,
                                                 config=replace(plain.config, verifier=verifier))
        ids = log.list_session_ids() if all_ else [session]
        bad: list[dict[str, Any]] = []
        gone: list[str] = []
        good = 0
        quiet = len(ids) < 5 or as_json or not is_tty()
        for sid in track(ids, description="verifying", console=console, disable=quiet, transient=True):
            try:
                log.verify(sid)
                good += 1
            except CorruptionError as exc:
                bad.append({"session": sid, "key": exc.key, "seq": exc.seq, "error": str(exc)})
            except SessionNotFound as exc:
                # Expired by retention (a tombstone) or deleted since it was listed: no
                # chain to verify, and nothing broken. A session asked for by name is.
                if not all_:
                    bad.append({"session": sid, "key": None, "seq": None, "error": str(exc)})
                else:
                    gone.append(sid)
            except S3LogError as exc:  # FormatVersionError, SignatureError...: their key when they have one
                key = getattr(exc, "key", None)
                bad.append({"session": sid, "key": key if isinstance(key, str) else None, "seq": None,
                            "error": str(exc)})
        if log is not plain:
            log.close()
    if as_json:
        emit_json({"verified": good, "broken": bad, "expired_or_deleted": gone})
    else:
        for b in bad:
            echo(styled(("BROKEN", "bold red"), f" {b['session']}: {b['error']}"))
        echo(f"{good} verified, {len(bad)} broken" + (f", {len(gone)} expired or deleted" if gone else ""))
    if bad:
        raise typer.Exit(1)


@app.command()
@handle_errors
def fork(
    ctx: typer.Context,
    session: str = _SESSION,
    at_seq: int = typer.Option(None, "--at-seq", metavar="SEQ", help="Fork after this seq."),
    at_hash: str = typer.Option(None, "--at-hash", metavar="HASH", help="Fork after the entry with this hash (hex)."),
    as_json: bool = _JSON,
) -> None:
    """Fork a session at a committed entry (the latest by default); prints the new id."""
    if at_seq is not None and at_hash is not None:
        raise typer.BadParameter("give --at-seq or --at-hash, not both", param_hint="--at-hash")
    if at_hash is not None:
        try:
            bytes.fromhex(at_hash)
        except ValueError:
            raise typer.BadParameter(f"not a hash: {at_hash!r} (give the entry's hash in hex)",
                                     param_hint="--at-hash") from None
    with command_log(ctx) as log:
        child = log.fork(session, at_seq=at_seq, at_hash=at_hash)
        if not as_json:
            echo(child)
            return
        parent = log.head(child).parent
    emit_json({"session": child, "parent": parent.to_map() if parent else None})


class LineageFormat(StrEnum):
    """How ``lineage`` draws the family."""

    tree = "tree"
    mermaid = "mermaid"
    dot = "dot"


@app.command()
@handle_errors
def lineage(
    ctx: typer.Context,
    session: str = _SESSION,
    fmt: LineageFormat = typer.Option(LineageFormat.tree, "--format", help="How to draw it."),
    as_json: bool = _JSON,
) -> None:
    """Show a session's family: its ancestors and everything forked from them."""
    with command_log(ctx) as log:
        steps = log.lineage(session)
        # A replaced ancestor (another session at its id now) is not drawn as the root:
        # its children would be that other session's.
        root = next(s.session for s in reversed(steps) if not s.replaced)
        edges: list[tuple[str, str]] = []

        def collect(sid: str) -> None:
            for child in sorted(log.children(sid)):
                edges.append((sid, child))
                collect(child)

        collect(root)
    if as_json:
        emit_json({
            "session": session, "root": root,
            "ancestors": [{"session": s.session, "parent": s.parent.to_map() if s.parent else None,
                           "expired": s.expired, "replaced": s.replaced} for s in steps],
            "edges": [{"parent": a, "child": b} for a, b in edges],
        })
        return
    if fmt is LineageFormat.mermaid:
        echo("graph TD")
        for a, b in edges:
            echo(f'  s{a.replace("-", "")}["{a}"] --> s{b.replace("-", "")}["{b}"]')
        return
    if fmt is LineageFormat.dot:
        echo("digraph lineage {")
        for a, b in edges:
            echo(f'  "{a}" -> "{b}";')
        echo("}")
        return
    if not is_tty():
        # One session per line, indented two spaces a generation; the asked-for one starred.
        depth = {root: 0}
        echo(root + (" *" if root == session else ""))
        for a, b in edges:  # collected depth-first: already in drawing order
            depth[b] = depth[a] + 1
            echo("  " * depth[b] + b + (" *" if b == session else ""))
        return
    tree = Tree(Text(root, style="bold" if root == session else ""))
    nodes = {root: tree}
    for a, b in edges:
        nodes[b] = nodes[a].add(Text(b, style="bold" if b == session else ""))
    console.print(tree)


def rm_decision(*, yes: bool, dry_run: bool, stdin_is_tty: bool, ask: Callable[[], bool]) -> str:
    """Whether ``rm`` may delete: ``"delete"``, ``"dry-run"``, ``"declined"`` or ``"refuse"``.

    Deleting cannot be undone, so it takes ``--yes`` or a "y" typed at a terminal; with
    no terminal to ask and no ``--yes`` the answer is to refuse.
    """
    if dry_run:
        return "dry-run"
    if yes:
        return "delete"
    if not stdin_is_tty:
        return "refuse"
    return "delete" if ask() else "declined"


def _left_lines(plan: Any) -> list[str]:
    """What ``rm`` leaves, one line each: the key, who removes it, when, and why it stays."""
    from s3log.config import ACTIVITY_KEEP_DAYS

    young = _duration_text(plan.left_until_ms)
    return [
        *(f"left for gc: {k} (gc deletes it once older than {young} and no head names it: a session "
          "created again at this id, or a fork retried into it, may still name it)" for k in plan.left_for_gc),
        *(f"left for expire: {k} (expire prunes its day once older than {ACTIVITY_KEEP_DAYS} days or its "
          "--idle: a session created again at this id that day relies on it)" for k in plan.left_for_expire),
    ]


def _duration_text(ms: int) -> str:
    """``1200000`` as ``20m``, for the few round durations ``rm`` names."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


@app.command("rm")
@handle_errors
def rm(
    ctx: typer.Context,
    session: str = _SESSION,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be deleted, and what left."),
    as_json: bool = _JSON,
) -> None:
    """Delete a session: its head first, then its segments, its children's fork markers, its
    own fork marker and its activity markers of past days.

    Left for later, because a session created again at the id (or a fork retried into
    it) may rely on them: its own fork marker and a first segment the head does not
    name while younger than twice the commit deadline (20m by default; 's3log gc'
    deletes them after), and its activity markers of today ('s3log expire' prunes
    their day). Both --dry-run and the delete name each object left.
    """
    with command_log(ctx) as log:
        plan = log.delete_plan(session)  # SessionNotFound before anything is asked or deleted
        keys = plan.objects
        children = log.children(session)

        def ask() -> bool:
            forks = f"; {len(children)} forks keep pointing at it" if children else ""
            return typer.confirm(f"Delete session {session} ({len(keys)} objects{forks})?", default=False,
                                 err=True)

        decision = rm_decision(yes=yes, dry_run=dry_run, stdin_is_tty=is_tty(sys.stdin), ask=ask)
        if decision == "refuse":
            fail(f"not deleting {session}: no terminal to confirm on; pass --yes to delete "
                 "(or --dry-run to see what would go)", 2)
        if decision == "declined":
            echo("nothing deleted", err=True)
            raise typer.Exit(1)
        deleted = 0 if decision == "dry-run" else log.delete(session)
    if as_json:
        emit_json({"session": session, "dry_run": dry_run, "keys": keys, "deleted": deleted,
                   "activity": plan.activity, "left_for_gc": plan.left_for_gc,
                   "left_for_expire": plan.left_for_expire, "left_until_ms": plan.left_until_ms})
        return
    days = f", and its activity markers of {len(plan.activity)} past days" if plan.activity else ""
    if dry_run:
        for k in keys:
            echo(k)
        echo(f"would delete {session} ({len(keys)} objects{days})")
    else:
        echo(f"deleted {session} ({deleted} objects{days})")
    for line in _left_lines(plan):
        echo(line)
