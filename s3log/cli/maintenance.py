"""Commands that run or maintain the store: local-s3, gc, expire, demo."""

from __future__ import annotations

import dataclasses
import signal
import sys
import time
from typing import Any

import typer

from s3log._format.times import duration_ms
from s3log.cli.app import app
from s3log.cli.common import (
    command_log,
    echo,
    emit_json,
    err_console,
    fail,
    handle_errors,
    is_tty,
    one_line,
    settings,
    styled,
)
from s3log.errors import InvalidArgumentError
from s3log.results import ExpireProgress


def parse_duration(text: str, param_hint: str | None = None) -> int:
    """``90s``, ``15m``, ``1h``, ``2d`` (or a sum like ``1h30m``) in milliseconds, at most
    100 years (:func:`s3log._format.times.duration_ms`). ``param_hint`` names the option in the error."""
    try:
        return duration_ms(text)
    except InvalidArgumentError as exc:
        raise typer.BadParameter(str(exc).removeprefix("invalid argument duration: "), param_hint=param_hint) from None


@app.command("local-s3")
@handle_errors
def local_s3(
    ctx: typer.Context,
    port: int = typer.Option(0, "--port", metavar="PORT", help="Port on 127.0.0.1 (0: a free one)."),
    bucket: str | None = typer.Option(
        None, "--bucket", metavar="NAME",
        help="Create this bucket and print S3LOG_BUCKET for it (default: the global --bucket / S3LOG_BUCKET).",
    ),
) -> None:
    """Run the embedded local S3 (moto, with atomic conditional PUTs) until Ctrl-C or SIGTERM."""
    from s3log.testing.localserver import LocalS3

    bucket = bucket or settings(ctx).bucket
    # Ctrl-C stops it even where SIGINT was inherited ignored (a command started in the
    # background by a shell without job control), and so does a supervisor's SIGTERM.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    server = LocalS3(port=port).start()
    try:
        echo(f"local S3 listening on {server.endpoint_url}")
        env = server.env()
        if bucket:
            env["S3LOG_BUCKET"] = server.create_bucket(bucket)
        for k, v in env.items():
            echo(f"export {k}={v}")
        if not bucket:
            echo("# no bucket yet: pass --bucket NAME to create one", err=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        echo("stopping", err=True)
    finally:
        server.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@app.command()
@handle_errors
def gc(
    ctx: typer.Context,
    older_than: str = typer.Option("1h", "--older-than", metavar="DURATION",
                                   help="Grace period: younger objects are kept (90s, 15m, 1h, 2d)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only report."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Delete segments no head references (orphans of lost races and merges)."""
    grace = parse_duration(older_than, "--older-than")
    with command_log(ctx) as log:
        report = log.gc(older_than_ms=grace, dry_run=dry_run)
    if as_json:
        emit_json({"sessions": report.sessions, "unreferenced": report.unreferenced, "deleted": report.deleted,
                   "kept_young": report.kept_young, "broken": report.broken, "failed": report.failed})
    else:
        verb = "would delete" if dry_run else "deleted"
        echo(f"{report.sessions} sessions; {verb} {len(report.unreferenced if dry_run else report.deleted)} "
             f"unreferenced objects; kept {report.kept_young} inside the grace period")
        for sid in report.broken:
            echo(f"broken: session {sid} has an unreadable head; its objects were left alone")
    if report.failed:
        # A scheduled gc must not look done when its deletes were refused.
        for key, why in report.failed.items():
            echo(f"could not delete {key}: {one_line(why)}", err=True)
        raise typer.Exit(1)


@app.command()
@handle_errors
def doctor(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Check that the store honours what commits and deletes rely on: If-None-Match and
    If-Match, stale ETags, racing conditional PUTs and If-Match on DELETE (about a dozen
    small PUTs and two DELETEs under _probe/)."""
    with command_log(ctx) as log:
        report = log.check_store()
    if as_json:
        emit_json({"ok": report.ok, "if_none_match": report.if_none_match, "if_match": report.if_match,
                   "stale_if_match": report.stale_if_match, "racing_if_match": report.racing_if_match,
                   "racing_creates": report.racing_creates, "delete_if_match": report.delete_if_match,
                   "detail": report.detail})
    else:
        def word(v: object) -> str:
            if isinstance(v, str):
                return v  # "unsupported": a request the store cannot send
            return "honoured" if v else ("IGNORED" if v is False else "untested")

        for what, seen in report.checks:
            echo(f"{what}: {word(seen)}")
        echo(report.detail)
    if not report.ok:
        raise typer.Exit(1)


def is_local_endpoint(url: str | None) -> bool:
    """Whether ``url`` is an S3 endpoint on this machine (a test server), not AWS or a remote one."""
    if not url:
        return False
    from urllib.parse import urlsplit

    return (urlsplit(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


#: The key prefix the demo writes under unless --prefix (or S3LOG_PREFIX) names one.
DEMO_PREFIX = "s3log-demo"


@app.command()
@handle_errors
def demo(
    ctx: typer.Context,
    workers: int = typer.Option(6, "--workers", metavar="N", min=1, help="Worker processes."),
    turns: int = typer.Option(8, "--turns", metavar="N", min=1, help="Invocations per worker."),
    sessions: int = typer.Option(3, "--sessions", metavar="N", min=1, help="Shared sessions they race on."),
    yes: bool = typer.Option(False, "--yes", "-y",
                             help="Write into a bucket on a remote endpoint (AWS) that the demo did not create."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Race serverless agent workers on shared sessions, then check nothing was lost.

    Without --bucket / S3LOG_BUCKET it starts an embedded local S3 and creates a bucket
    there. It writes under the prefix 's3log-demo' unless --prefix / S3LOG_PREFIX names
    one, and says where before it starts. Into a bucket on a remote endpoint (AWS) it
    did not create it writes only with --yes.
    """
    from s3log.cli.demo import run_demo

    s = settings(ctx)
    explicit = ctx.find_root().get_parameter_source("prefix")
    prefix = s.prefix if explicit is not None and explicit.name != "DEFAULT" else DEMO_PREFIX
    server = None
    bucket, endpoint = s.bucket, s.endpoint_url
    if bucket is not None and not is_local_endpoint(endpoint) and not yes:
        raise typer.BadParameter(
            f"the demo would write sessions into bucket {bucket} under {prefix}/ at "
            f"{endpoint or 'AWS'}, a bucket it did not create: pass --yes to do so, or unset "
            "S3LOG_BUCKET to run it on an embedded local S3", param_hint="--yes")
    if bucket is None:
        from s3log.testing.localserver import LocalS3

        server = LocalS3().start()
        import os

        os.environ.update(server.env())
        endpoint = server.endpoint_url
        bucket = server.create_bucket("s3log-demo")
    if not as_json:
        where = "an embedded local S3 at " if server is not None else ""
        echo(f"target: bucket {bucket}, prefix {prefix}/, on {where}{endpoint or 'AWS'}")
    try:
        if not as_json:
            echo(f"{workers} workers x {turns} turns racing on {sessions} sessions "
                 "(every worker's first commit on the same head)...")
        r = run_demo(bucket=bucket, endpoint=endpoint, prefix=prefix, workers=workers, turns=turns,
                     sessions=sessions)
    finally:
        if server is not None:
            server.stop()
    if as_json:
        emit_json({**dataclasses.asdict(r), "ok": r.ok, "bucket": bucket, "prefix": prefix, "endpoint": endpoint})
        if not r.ok:
            raise typer.Exit(1)
        return
    _demo_report(r)


def _demo_report(r: Any) -> None:
    """The demo's findings, each figure with what it means."""
    echo(f"sessions: {r.sessions} ({r.roots} shared roots, {r.sessions - r.roots} forks)")
    echo(f"commits: {r.commits}, conflicts resolved by forking: {r.conflicts} (a commit that found the head "
         "moved since its worker read it continues in a fork; nothing is merged or lost)")
    echo(f"entries stored: {r.entries} = {r.acked} acknowledged to workers + {r.fork_entries} fork entries "
         "(each fork opens with one: where it left its parent, and the parent's entries it carries as its seed)")
    per = ", ".join(f"{k} {v:.2f}" for k, v in r.requests_per_commit.items() if v)
    echo(f"requests per commit: {per} (a worker process's first commit also runs the precondition probe, "
         "about a dozen small PUTs: s3log doctor)")
    echo("lineage:")
    for depth, sid, n in r.tree:
        echo(f"  {'  ' * depth}{'└─ ' if depth else ''}{sid} ({n} entries)")
    echo(f"every chain verified: {'yes' if not r.corrupt else 'NO'}; "
         f"lost: {len(r.missing)}; duplicated: {len(r.duplicated)}; {r.seconds:.1f}s")
    if not r.ok:
        for line in r.corrupt:
            echo(styled((line, "red")))
        fail("the demo found lost, duplicated or corrupt entries")


def parse_labels(values: list[str] | None) -> dict[str, str] | None:
    """``["tenant=t1", "env=prod"]`` as a map; a value without ``=`` is a usage error."""
    if not values:
        return None
    out: dict[str, str] = {}
    for v in values:
        name, sep, value = v.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"not a label: {v!r} (use NAME=VALUE)", param_hint="--label")
        out[name] = value
    return out


@app.command()
@handle_errors
def expire(
    ctx: typer.Context,
    idle: str = typer.Option(..., "--idle", metavar="DURATION",
                             help="Expire sessions with no commit for this long (30d, 12h, 1d12h)."),
    label: list[str] = typer.Option(None, "--label", metavar="NAME=VALUE",
                                    help="Only sessions with this label (repeatable; all must match)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only report what would expire."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Expire idle sessions: each head is deleted with If-Match (gc collects the rest).

    Writes nothing. A session committed to during the sweep is kept; a writer that
    commits after its session expired is told it is gone (nothing of that commit is
    stored). Readers of an expired session get "not found". Run ``s3log gc`` afterwards
    to free the space. Needs a store that can make a DELETE conditional (not obstore).
    """
    idle_ms = parse_duration(idle, "--idle")
    if idle_ms <= 0:
        raise typer.BadParameter("must be longer than 0", param_hint="--idle")
    labels = parse_labels(label)
    with command_log(ctx) as log:
        if is_tty(sys.stderr) and not as_json:
            from rich.progress import Progress

            with Progress(console=err_console, transient=True) as bar:
                task = bar.add_task("expiring", total=None)

                def step(p: ExpireProgress) -> None:
                    bar.update(task, total=p.total, completed=p.done,
                               description=f"expired {p.expired}, kept {p.kept}")

                report = log.expire(idle_for=idle_ms, labels=labels, dry_run=dry_run, progress=step)
        else:
            report = log.expire(idle_for=idle_ms, labels=labels, dry_run=dry_run)
    if as_json:
        emit_json(dataclasses.asdict(report))
    else:
        verb = "would expire" if dry_run else "expired"
        echo(f"{report.examined} sessions examined; {verb} {len(report.expired)}; kept {report.kept} "
             f"active (of which {len(report.raced)} committed during the sweep); "
             f"{report.skipped_labels} idle but not matching the labels; {report.heads_read} heads read")
        if report.pruned_days:
            echo(f"activity index: {'would prune' if dry_run else 'pruned'} {len(report.pruned_days)} old days")
        for line in report.errors:
            echo(styled(("error: ", "red"), line), err=True)
    if report.errors:
        raise typer.Exit(1)
