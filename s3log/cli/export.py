"""Commands for batch analytics: export and query."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn
from rich.table import Table

from .app import app, console, emit_json, fail, handle_errors, open_log
from .maintenance import parse_duration


def parse_time(text: str | None) -> int | None:
    """``2026-01-31``, an ISO timestamp, or a duration ago (``7d``, ``12h``) in ms."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        now = datetime.now(UTC).timestamp() * 1000
        return int(now - parse_duration(text))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


@app.command()
@handle_errors
def export(
    fmt: str = typer.Option("parquet", "--format", help="parquet, jsonl or csv."),
    out: Path = typer.Option(..., "--out", help="Output directory (parquet: Hive partitions by date)."),
    since: str = typer.Option(None, "--since", help="Only entries at or after (date, ISO time, or 7d)."),
    until: str = typer.Option(None, "--until", help="Only entries before."),
    kind: list[str] = typer.Option(None, "--kind", help="Only these kinds (repeatable)."),
) -> None:
    """Export every session's entries, verified, for a query engine."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.dataset as ds

    from .. import analytics

    if fmt not in ("parquet", "jsonl", "csv"):
        fail(f"unknown format {fmt!r}: use parquet, jsonl or csv")
    log = open_log()
    out.mkdir(parents=True, exist_ok=True)
    rows = 0
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=console, transient=True) as bar:
        task = bar.add_task("exporting", total=None)

        def batches() -> Iterator[pa.RecordBatch]:
            nonlocal rows
            for b in analytics.scan(log.store, since=parse_time(since), until=parse_time(until),
                                    kinds=kind or None, prefix=log.prefix):
                rows += b.num_rows
                bar.update(task, description=f"exporting: {rows} entries")
                yield b

        if fmt == "parquet":
            schema = analytics.SCHEMA.append(pa.field("date", pa.string()))
            ds.write_dataset(
                (analytics.with_date(b) for b in batches()), out, schema=schema, format="parquet",
                partitioning=ds.partitioning(pa.schema([("date", pa.string())]), flavor="hive"),
                existing_data_behavior="overwrite_or_ignore",
            )
        elif fmt == "jsonl":
            with (out / "entries.jsonl").open("w") as f:
                for b in batches():
                    for r in b.drop_columns(["data_cbor"]).to_pylist():
                        r["ts"] = r["ts"].isoformat()
                        r["data"] = json.loads(r.pop("data_json")) if r["data_json"] else None
                        f.write(json.dumps(r) + "\n")
        else:
            writer: Any = None
            for b in batches():
                b = b.drop_columns(["data_cbor"])
                if writer is None:
                    writer = pcsv.CSVWriter(str(out / "entries.csv"), b.schema)
                writer.write_batch(b)
            if writer is not None:
                writer.close()
    log.close()
    console.print(f"exported {rows} entries to {out} ({fmt})")


@app.command()
@handle_errors
def query(
    sql: str = typer.Argument(..., help="SQL over the view `entries`."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON rows."),
) -> None:
    """Run SQL (DuckDB) over every session's entries, as the view ``entries``."""
    import duckdb

    from .. import analytics

    log = open_log()
    con = duckdb.connect()
    analytics.duckdb(con, log.store, prefix=log.prefix)
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()
    log.close()
    if as_json:
        emit_json([dict(zip(names, r, strict=True)) for r in rows])
        return
    table = Table(*names)
    for r in rows:
        table.add_row(*(str(v) for v in r))
    console.print(table)
