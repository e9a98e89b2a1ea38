"""Commands for batch analytics: export and query."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from s3log._format.times import to_ms
from s3log.cli.app import app, console, emit_json, err_console, fail, handle_errors, open_log
from s3log.cli.common import cell, cell_text, jsonable, print_table, when
from s3log.errors import InvalidArgumentError

if TYPE_CHECKING:
    from s3log.analytics import ExportMode


def parse_time(text: str | None, param_hint: str | None = None) -> int | None:
    """``2026-01-31``, an ISO timestamp, or a duration ago (``7d``, ``12h``) in ms
    (:func:`s3log._format.times.to_ms`, as the library's ``since``/``until``).

    ``param_hint`` names the option in the usage error a bad value is.
    """
    if not text:
        return None
    try:
        return to_ms(text, "time", now_ms=int(time.time() * 1000))
    except InvalidArgumentError as exc:
        raise typer.BadParameter(str(exc), param_hint=param_hint) from None


@contextlib.contextmanager
def scan_progress(label: str, quiet: bool) -> Iterator[Callable[[Any], None] | None]:
    """A ``progress=`` callback drawing sessions done of total and entries/s on stderr.

    Only on a terminal and without ``--quiet``: in a pipe or a log file nothing is drawn.
    """
    if quiet or not err_console.is_terminal:
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
               TextColumn("{task.fields[rate]}"), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(label, total=None, rate="")

        def update(p: Any) -> None:
            bar.update(task, completed=p.sessions_done, total=p.sessions_total,
                       rate=f"{p.entries:,} entries, {p.entries_per_s:,.0f}/s")

        yield update


def _ts_text(ms: int) -> str:
    import pyarrow as pa

    from s3log import analytics

    text: str = pa.array([ms], pa.int64()).view(analytics.SCHEMA.field("ts").type).cast(pa.string())[0].as_py()
    return text


def _jsonl_row(r: dict[str, Any]) -> str:
    """One entry as a line of JSON, in the forms ``show --json`` prints: ``ts`` as its time
    (``2026-11-30T09:40:00.123Z``), ``data`` from data_json (the same JSON rule); where
    data_json is null (data nested too deep for JSON), ``data`` null and ``data_cbor`` the
    stored CBOR in hex."""
    cbor = r.pop("data_cbor")
    shown = when(r["ts"])
    r["ts"] = _ts_text(r["ts"]) if shown.startswith("ms:") else shown  # after year 9999: Arrow's text
    text = r.pop("data_json")
    r["data"] = json.loads(text) if text is not None else None
    if text is None:
        r["data_cbor"] = bytes(cbor).hex()
    return json.dumps(jsonable(r), ensure_ascii=False, allow_nan=False)


def _write_rows(batches: Iterator[Any], out: Path, fmt: str, mode: str) -> int:
    """Write ``batches`` as ``fmt`` (jsonl or csv) into the directory ``out``; the row count."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    from s3log import analytics

    rows = 0
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        with (out / "entries.jsonl").open("a" if mode == "append" else "w") as f:
            for b in batches:
                rows += b.num_rows
                # ts as ms: Python's datetime ends with year 9999, a scan's times do not.
                b = b.set_column(b.schema.get_field_index("ts"), "ts", b.column("ts").cast(pa.int64()))
                for r in b.to_pylist():
                    f.write(_jsonl_row(r) + "\n")
        return rows
    name = "entries.csv" if mode != "append" or not (out / "entries.csv").exists() else \
        f"entries-{uuid.uuid4().hex[:12]}.csv"  # appending: a new file, each with its header
    writer: Any = None
    try:
        for b in batches:
            rows += b.num_rows
            b = b.drop_columns(["data_cbor"])
            if writer is None:
                writer = pcsv.CSVWriter(str(out / name), b.schema)
            writer.write_batch(b)
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        empty = pa.Table.from_batches([], analytics.SCHEMA).drop_columns(["data_cbor"])
        pcsv.write_csv(empty, str(out / name))
    return rows


@app.command()
@handle_errors
def export(
    fmt: str = typer.Option("parquet", "--format", help="parquet, jsonl or csv."),
    out: str = typer.Option(..., "--out", metavar="PATH", help="Output directory (parquet: Hive partitions by date)."),
    since: str = typer.Option(None, "--since", help="Only entries at or after (date, ISO time, or 7d)."),
    until: str = typer.Option(None, "--until", help="Only entries before."),
    kind: list[str] = typer.Option(None, "--kind", help="Only these kinds (repeatable)."),
    session: list[str] = typer.Option(None, "--session", help="Only these sessions (repeatable)."),
    mode: str = typer.Option(
        "error", "--mode", help="If --out is not empty: error (default), overwrite (replace it) or append."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress and no summary line."),
) -> None:
    """Export sessions' entries, verified, for a query engine.

    Parquet writes DIR/date=YYYY-MM-DD/part-*.parquet and DIR/_sessions.parquet (one
    row per session, labels and meta); jsonl and csv write one file of entries.
    """
    from s3log import analytics
    from s3log.analytics import export as exports
    from s3log.analytics import reading

    if fmt not in ("parquet", "jsonl", "csv"):
        raise typer.BadParameter(f"unknown format {fmt!r}: use parquet, jsonl or csv", param_hint="--format")
    modes: dict[str, ExportMode] = {"error": "error", "overwrite": "overwrite", "append": "append"}
    if mode not in modes:
        raise typer.BadParameter(f"unknown mode {mode!r}: use error, overwrite or append", param_hint="--mode")
    export_mode = modes[mode]
    # Checked as given: Path("") is ".", and an overwrite of "." (or of a directory holding
    # it, such as $HOME) would replace the working directory.
    if not out.strip():
        raise typer.BadParameter("must name a directory, not an empty string", param_hint="--out")
    if export_mode == "overwrite" and exports.holds_working_dir(out):
        raise typer.BadParameter(f"{out} is the working directory or holds it: an overwrite would replace it; "
                                 "name the export's own directory", param_hint="--out")
    options: dict[str, Any] = {
        "since": parse_time(since, "--since"), "until": parse_time(until, "--until"), "kinds": kind or None,
        "sessions": session or None,
    }
    # Every option is checked, the log opened and the bucket answered (the first batch
    # read) before anything is written, and --mode overwrite replaces the output only
    # once the whole scan is written: a typo, a wrong bucket or a scan failing part way
    # never empties it (to_parquet does the same).
    log = open_log()
    rows = 0
    try:
        with scan_progress("exporting", quiet) as progress:
            options.update(prefix=log.prefix, progress=progress, verifier=log.config.verifier,
                           log_id=log.config.log_id, encryption=log.config.encryption)
            if fmt == "parquet":
                rows = analytics.to_parquet(log.store, out, mode=export_mode, **options)
            else:
                from pyarrow import fs

                local, target = fs.LocalFileSystem(), str(Path(out).absolute())
                batches = reading.checked_scan(log.store, **options)
                try:
                    exports.check_sessions_exist(log.store, options["sessions"], log.prefix)
                    clear = exports.check_output(local, target, export_mode, "--out")
                    batches = reading.first_then(batches)
                except BaseException:
                    batches.close()
                    raise
                # Overwrite writes a new directory, swapped in once every batch is written:
                # a scan failing part way leaves the old export (s3log.analytics.export.output_dir).
                try:
                    with exports.output_dir(local, target, clear) as where:
                        rows = _write_rows(batches, Path(where), fmt, mode)
                finally:
                    batches.close()
    finally:
        log.close()
    if not quiet:
        console.print(f"exported {rows} entries to {out} ({fmt})")


@app.command()
@handle_errors
def query(
    sql: str = typer.Argument(..., help="SQL over the views `entries` and `sessions`."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON rows."),
    since: str = typer.Option(None, "--since", help="Only entries at or after (date, ISO time, or 7d)."),
    until: str = typer.Option(None, "--until", help="Only entries before."),
    kind: list[str] = typer.Option(None, "--kind", help="Only these kinds (repeatable)."),
    session: list[str] = typer.Option(None, "--session", help="Only these sessions (repeatable)."),
    source: Path = typer.Option(None, "--from", help="Query a Parquet export (s3log export) instead of S3."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress."),
) -> None:
    """Run SQL (DuckDB) over the views ``entries`` and ``sessions``, streamed.

    --since/--until/--kind/--session cut what is read (sessions outside the window or
    not named are never fetched), not only the rows the SQL sees.

    Values print as 'show --json' prints them: times as ISO 8601 UTC
    (2026-11-30T09:40:00.123Z), bytes as hex, NaN and infinities as null; in the table,
    text as it is and anything else as its JSON.
    """
    if not sql.strip():
        # DuckDB runs an empty string as no statement and returns no cursor.
        raise typer.BadParameter("must be a SQL statement, not an empty string", param_hint="SQL")
    from s3log import analytics  # names the analytics extra when pyarrow is missing
    from s3log._extras import extra

    with extra("analytics"):
        import duckdb

    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # ours is on stderr, and only on a terminal
    filters: dict[str, Any] = {
        "since": parse_time(since, "--since"), "until": parse_time(until, "--until"), "kinds": kind or None,
        "sessions": session or None,
    }
    log = None
    try:
        with scan_progress("querying", quiet) as progress:
            if source is not None:
                if not source.is_dir():
                    raise typer.BadParameter(f"{source}: not a directory (give the --out of s3log export "
                                             "--format parquet)", param_hint="--from")
                analytics.duckdb_parquet(con, str(source), **filters)
            else:
                log = open_log()
                analytics.duckdb(con, log.store, prefix=log.prefix, progress=progress, verifier=log.config.verifier,
                                 log_id=log.config.log_id, **filters)
            try:
                cur = con.execute(sql)
                if cur is None:  # only comments or semicolons
                    raise typer.BadParameter(f"holds no SQL statement: {sql!r}", param_hint="SQL")
                names = [d[0] for d in cur.description]
                rows = cur.fetchall()
            except duckdb.Error as exc:
                raised = analytics.stream_error(con)
                if raised is not None:  # a scan behind a view failed: its own error, as raised
                    raise raised from exc
                fail(f"query failed: {exc}")
    finally:
        if log is not None:
            log.close()
    if as_json:
        emit_json([{n: cell(v) for n, v in zip(names, r, strict=True)} for r in rows])
        return
    # Piped: plain, padded, never wrapped or cut; on a terminal a table. Cells are never markup;
    # each is its text, or the JSON --json prints for it (times as show prints them, bytes as hex).
    print_table(names, [[cell_text(v) for v in r] for r in rows])
