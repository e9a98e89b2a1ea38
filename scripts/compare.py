"""Two writers, nothing lost: the same race, side by side (`make compare`).

Two workers restore one LangGraph thread (OpenAI Agents session, agent session), both
run a turn, both are acknowledged; then a fresh reader counts how many acknowledged
checkpoints (items) it reaches with the state they were written with, and whether one
run's history interleaves with the other's. The race, its fixed order of steps and
what each count means: s3log/testing/conformance.py, which tests/test_two_writers.py
runs too.

Rows: LangGraph's SqliteSaver and (when Debian's PostgreSQL binaries are installed)
PostgresSaver on a PostgreSQL this script starts in a temporary directory on
127.0.0.1; the SDK's SQLiteSession; s3log's LangGraph saver, OpenAI session and
AgentSession on moto's S3 server on 127.0.0.1, by default and with the run lease
(docs/decisions/0048-a-run-lease-for-the-integrations.md).

    python scripts/compare.py                               # prints the table
    python scripts/compare.py --docs docs/integrations.md   # and writes it there
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s3log.testing.conformance import RaceResult, race_agent_sessions, race_checkpointers, race_sessions

BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"


@dataclass
class Row:
    """One line of the table: who, on what, with which guard, and what the race left."""

    name: str
    store: str
    guard: str
    result: RaceResult | None = None
    skipped: str = ""
    #: How the late run was refused, when it was.
    refusal: str = ""


def _late_run(r: RaceResult, refusal: str) -> str:
    if r.refused:
        return f"refused{': ' + refusal if refusal else ''}"
    if r.forked:
        return "continued in a fork"
    return "stored"


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| implementation | store | guard | acknowledged | reachable after | interleaved | late run |",
        "|---|---|---|---:|---:|---|---|",
    ]
    for row in rows:
        r = row.result
        if r is None:
            lines.append(f"| {row.name} | {row.store} | {row.guard} | - | - | - | skipped: {row.skipped} |")
            continue
        lost = f" (**{r.lost} lost**)" if r.lost else ""
        mixed = "**yes**" if r.interleaved else "no"
        lines.append(f"| {row.name} | {row.store} | {row.guard} | {r.acknowledged} | {r.reachable}{lost} | {mixed} "
                     f"| {_late_run(r, row.refusal)} |")
    return "\n".join(lines)


# --------------------------------------------------------------------- peers


def sqlite_saver(tmp: Path) -> RaceResult:
    """LangGraph's SqliteSaver: each worker its own connection to one database file."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = tmp / "langgraph.db"
    return race_checkpointers(lambda worker: SqliteSaver(sqlite3.connect(db, check_same_thread=False)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


@contextlib.contextmanager
def local_postgres(tmp: Path) -> Iterator[str]:
    """A PostgreSQL cluster in ``tmp`` on 127.0.0.1 (initdb, pg_ctl), stopped on exit;
    yields its DSN. Run as root, the server runs as the ``postgres`` user (it refuses root)."""
    bindir = _pg_bin()
    if bindir is None:
        raise LookupError("no PostgreSQL binaries (Debian: apt-get install postgresql)")
    prefix: list[str] = []
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            raise LookupError("running as root and there is no postgres user to run the server") from None
        os.chown(tmp, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data, port = tmp / "data", _free_port()

    def pg(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    pg(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {tmp} -c fsync=off"
    pg(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(tmp / "server.log"), "-w", "start")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(Exception):
            pg(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")


def postgres_saver(dsn: str) -> RaceResult:
    """LangGraph's PostgresSaver: each worker its own connection to one database."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    def make(worker: str) -> Any:
        conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        saver = PostgresSaver(conn)
        if worker == "seed":
            saver.setup()
        return saver

    return race_checkpointers(make)


def postgres_row() -> Row:
    """The PostgresSaver row, or the reason it was skipped."""
    row = Row("LangGraph `PostgresSaver`", "PostgreSQL (local)", "none")
    # Its own directory, not inside a private one: the server's user must reach it.
    pg_dir = Path(tempfile.mkdtemp(prefix="s3log-compare-pg-"))
    try:
        with local_postgres(pg_dir) as dsn:
            row.result = postgres_saver(dsn)
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        row.skipped = said[-1] if said else str(exc)
    except (LookupError, ImportError) as exc:
        row.skipped = str(exc)
    finally:
        shutil.rmtree(pg_dir, ignore_errors=True)
    return row


def sqlite_session(tmp: Path) -> RaceResult:
    """The OpenAI Agents SDK's SQLiteSession: each worker its own session object on one file."""
    from agents.memory import SQLiteSession

    db = tmp / "sessions.db"
    return asyncio.run(race_sessions(lambda worker: SQLiteSession("conv-1", db)))


# --------------------------------------------------------------------- s3log


def s3log_rows(endpoint: str, bucket: str) -> list[Row]:
    """s3log's saver, session and AgentSession; each worker its own Log and S3 client."""
    import s3log
    from s3log.integrations.langgraph import S3LogSaver
    from s3log.integrations.openai_agents import S3LogSession

    def log(prefix: str) -> Callable[[str], s3log.Log]:
        return lambda worker: s3log.Log(s3log.S3Store(bucket, endpoint_url=endpoint), prefix=prefix)

    def savers(prefix: str, **options: Any) -> Callable[[str], Any]:
        return lambda worker: S3LogSaver(log(prefix)(worker), **options)

    async def sessions(prefix: str, leased: bool) -> RaceResult:
        stores: list[Any] = []

        def make(worker: str) -> S3LogSession:
            stores.append(s3log.AsyncS3Store(bucket, endpoint_url=endpoint))
            return S3LogSession("conv-1", s3log.AsyncLog(stores[-1], prefix=prefix))

        try:
            return await race_sessions(make, guard=(lambda s: s.lease(ttl=60)) if leased else None)
        finally:
            for store in stores:
                await store.aclose()

    return [
        Row("s3log `S3LogSaver`", "S3 (moto)", "none (default)", race_checkpointers(savers("lg-plain"))),
        Row("s3log `S3LogSaver`", "S3 (moto)", "`strict=True`", race_checkpointers(savers("lg-strict", strict=True)),
            refusal="`ConflictError` at its first put"),
        Row("s3log `S3LogSaver`", "S3 (moto)", "`with saver.lease(cfg)`",
            race_checkpointers(savers("lg-lease"), guard=lambda saver, cfg: saver.lease(cfg, ttl=60)),
            refusal="`SessionBusy` before it reads"),
        Row("s3log `S3LogSession`", "S3 (moto)", "none (default)", asyncio.run(sessions("oa-plain", False))),
        Row("s3log `S3LogSession`", "S3 (moto)", "`async with session.lease()`",
            asyncio.run(sessions("oa-lease", True)),
            refusal="`SessionBusy` before it reads"),
        Row("s3log `AgentSession`", "S3 (moto)", "turn lease (always on)", race_agent_sessions(log("agent"))),
    ]


def run_all() -> list[Row]:
    """Every row, the peers first."""
    from s3log.testing.localserver import LocalS3

    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows.append(Row("LangGraph `SqliteSaver`", "SQLite file", "none", sqlite_saver(tmp)))
        rows.append(postgres_row())
        rows.append(Row("OpenAI Agents `SQLiteSession`", "SQLite file", "none", sqlite_session(tmp)))
    with LocalS3() as server:
        os.environ.update(server.env())
        rows.extend(s3log_rows(server.endpoint_url, server.create_bucket()))
    return rows


def write_docs(path: str, text: str) -> None:
    """Replace what lies between the compare markers in ``path`` with ``text``."""
    doc = Path(path).read_text()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    Path(path).write_text(doc[:start] + "\n" + text + "\n" + doc[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", default=None, help="also write the table into that Markdown file "
                                                      f"(between {BEGIN} and {END})")
    args = parser.parse_args(argv)
    text = table(run_all())
    print(text)
    if args.docs:
        write_docs(args.docs, text)
        print(f"wrote the table into {args.docs}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
