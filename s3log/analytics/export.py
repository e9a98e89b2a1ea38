"""Writing a scan out: :func:`to_parquet`, and the output modes every export shares.

``mode`` (:data:`ExportMode`: error, overwrite, append) is checked before anything is
deleted (:func:`check_output`); an overwrite writes elsewhere and swaps the new export
in only once the whole scan is written (:func:`output_dir`), so a scan failing part way
leaves the old one. ``s3log export`` (s3log.cli.export) writes JSON lines and CSV
through the same functions. Its own room: the filesystem side (local or S3 via
pyarrow.fs), apart from how entries are read.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from s3log._extras import extra
from s3log._format.values import Head
from s3log.analytics.columns import SCHEMA, SESSIONS_SCHEMA, _session_row, _sessions_batch
from s3log.analytics.options import _opened
from s3log.analytics.reading import checked_scan, first_then
from s3log.errors import InvalidArgumentError, S3LogError, SessionNotFound
from s3log.store.base import ObjectStore

with extra("analytics"):
    import pyarrow as pa


log = logging.getLogger(__name__)


ExportMode = Literal["error", "overwrite", "append"]


class OutputExistsError(S3LogError, FileExistsError):
    """An export target already holds data and no ``mode`` said what to do with it."""

    def __init__(self, target: str) -> None:
        self.target = target
        super().__init__(
            f"{target} is not empty: use mode overwrite (replace what it holds) or append (add files)"
        )


def _checked_target(path_or_uri: object, filesystem: object) -> str:
    """``path_or_uri`` as a string, it and ``filesystem`` checked (InvalidArgumentError
    naming either): an empty path is refused, not taken as ``.``."""
    from pyarrow import fs

    if isinstance(path_or_uri, os.PathLike):
        path_or_uri = os.fspath(path_or_uri)
    if not isinstance(path_or_uri, str) or not path_or_uri.strip():
        raise InvalidArgumentError(
            "path_or_uri", f"must name a directory or s3://bucket/prefix, not {path_or_uri!r}")
    if filesystem is not None and not isinstance(filesystem, fs.FileSystem):
        raise InvalidArgumentError("filesystem", f"must be a pyarrow.fs.FileSystem, not {filesystem!r}")
    return path_or_uri


def _filesystem_for(path_or_uri: str, store: Any, filesystem: Any) -> tuple[Any, str]:
    from pyarrow import fs

    if filesystem is not None:
        return filesystem, path_or_uri
    if path_or_uri.startswith("s3://"):
        return _s3_filesystem(path_or_uri, _endpoint_of(store))
    return fs.LocalFileSystem(), os.path.abspath(path_or_uri)


def holds_working_dir(target: str) -> bool:
    """Whether the local directory ``target`` is the working directory or one holding it
    (``.``, ``..``, a home directory): an overwrite of it would replace the files of the
    process, so :func:`check_output` refuses it."""
    here = os.path.realpath(os.getcwd())
    there = os.path.realpath(target)
    return here == there or here.startswith(there.rstrip(os.sep) + os.sep)


def prepare_output(filesystem: Any, target: str, mode: ExportMode) -> None:
    """Apply ``mode`` to an export target before anything is written.

    ``error`` (the default of every export): fail with :class:`OutputExistsError` if
    the target holds any file; ``overwrite``: delete what it holds (stale partitions
    included); ``append``: keep it (new files get unique names). :func:`to_parquet` and
    ``s3log export`` delete nothing here: they write an overwrite elsewhere first and
    swap it in once written (:func:`output_dir`).
    """
    if check_output(filesystem, target, mode):
        filesystem.delete_dir_contents(target, missing_dir_ok=True)


def check_output(filesystem: Any, target: str, mode: ExportMode, argument: str = "path_or_uri") -> bool:
    """The checks of :func:`prepare_output`, deleting nothing: whether ``mode`` will
    delete what the target holds (``overwrite`` of an existing directory). A local
    overwrite of the working directory or one holding it (:func:`holds_working_dir`)
    is an :class:`~s3log.InvalidArgumentError` naming ``argument``."""
    from pyarrow import fs

    if mode not in ("error", "overwrite", "append"):
        raise InvalidArgumentError("mode", f"unknown mode {mode!r}: use error, overwrite or append")
    info = filesystem.get_file_info(target)
    if info.type == fs.FileType.NotFound:
        return False
    if info.type != fs.FileType.Directory:
        raise OutputExistsError(target + " (a file, not a directory)")
    if mode == "overwrite" and isinstance(filesystem, fs.LocalFileSystem) and holds_working_dir(target):
        raise InvalidArgumentError(
            argument, f"{target} is the working directory or holds it: an overwrite would replace "
                      "it; name the export's own directory")
    if mode == "error" and filesystem.get_file_info(fs.FileSelector(target, recursive=False)):
        raise OutputExistsError(target)
    return mode == "overwrite"


@contextlib.contextmanager
def output_dir(filesystem: Any, target: str, clear: bool) -> Iterator[str]:
    """The directory an export of ``target`` writes into; with ``clear`` (``overwrite``
    of an existing directory, :func:`check_output`) a new one, which replaces what
    ``target`` holds only once the block ends without an exception.

    So a scan failing part way (a store fault, a strict scan's corrupt session) leaves
    the old export as it was: what was written goes with the staging directory. On a
    local filesystem the staging directory is a hidden sibling of ``target``, swapped
    in by two renames (the old export moved aside, the new one moved in, then the old
    one deleted); elsewhere (S3) it is a hidden ``.s3log-staging-*`` folder inside
    ``target`` (within the same bucket and permissions), whose files are moved up once
    the old ones are deleted: a failure during that move (not during the scan) can
    leave part of each.
    """
    if not clear:
        yield target
        return
    from pyarrow import fs

    local = isinstance(filesystem, fs.LocalFileSystem)
    tag = uuid.uuid4().hex[:12]
    if local:
        target = os.path.normpath(target)
        parent, name = os.path.split(target)
        staging = os.path.join(parent, f".{name}.s3log-staging-{tag}")
        aside = os.path.join(parent, f".{name}.s3log-old-{tag}")
    else:
        target = target.rstrip("/")
        staging, aside = f"{target}/.s3log-staging-{tag}", ""
    filesystem.create_dir(staging, recursive=True)
    try:
        yield staging
    except BaseException:
        # The export failed (or was interrupted): what it wrote goes, the old one stays.
        with contextlib.suppress(Exception):
            filesystem.delete_dir(staging)
        raise
    if local:
        _swap_in(filesystem, staging, target, aside)
    else:
        _move_up(filesystem, staging, target)


def _swap_in(filesystem: Any, staging: str, target: str, aside: str) -> None:
    """Replace the local directory ``target`` by ``staging``: renames, each atomic."""
    try:
        filesystem.move(target, aside)
    except OSError:
        # Not renamable (a mount point, no write access to its parent): its contents are
        # replaced instead, once the new export is complete.
        _move_up(filesystem, staging, target)
        return
    try:
        filesystem.move(staging, target)
    except BaseException:
        filesystem.move(aside, target)  # the old export back where it was
        raise
    try:
        filesystem.delete_dir(aside)
    except OSError as exc:  # the new export is in place: only disk space is at stake
        log.warning("export: could not delete the replaced export moved aside to %s: %s", aside, exc)


def _move_up(filesystem: Any, staging: str, target: str) -> None:
    """Replace what ``target`` holds by the files of ``staging`` (a folder inside it)."""
    from pyarrow import fs

    for info in filesystem.get_file_info(fs.FileSelector(target, recursive=False)):
        if info.path.rstrip("/") == staging:
            continue
        if info.type == fs.FileType.Directory:
            filesystem.delete_dir(info.path)
        else:
            filesystem.delete_file(info.path)
    made: set[str] = set()
    for info in filesystem.get_file_info(fs.FileSelector(staging, recursive=True)):
        if info.type != fs.FileType.File:
            continue
        dest = target + info.path[len(staging):]
        folder = dest.rsplit("/", 1)[0]
        if folder not in made:
            filesystem.create_dir(folder, recursive=True)
            made.add(folder)
        filesystem.move(info.path, dest)
    filesystem.delete_dir(staging)


def to_parquet(
    store: ObjectStore | str,
    path_or_uri: str,
    *args: Any,
    partition_by: str | None = "date",
    filesystem: Any = None,
    mode: ExportMode = "error",
    sessions_file: bool = True,
    **kwargs: Any,
) -> int:
    """Write the scan as Parquet under a directory or ``s3://bucket/prefix``.

    ``partition_by="date"`` writes Hive-style ``date=YYYY-MM-DD/`` directories, so a
    query engine filtering on date reads only the matching files. ``mode``: what to do
    if the target already holds data (``error``, ``overwrite`` or ``append``, see
    :func:`prepare_output`); an overwrite replaces the old export only once the whole
    scan is written (:func:`output_dir`), so a scan failing part way leaves it. With
    ``sessions_file`` the heads read are also written as ``_sessions.parquet``
    (:data:`~s3log.analytics.SESSIONS_SCHEMA`; engines reading the directory as a dataset skip ``_``
    files). ``scan`` options (``since``, ``kinds``, ``progress``, ``storage_options``...)
    pass through; a session named in ``sessions`` that has no head is a
    :class:`~s3log.SessionNotFound`, before anything is written. Returns the row count.
    """
    path = _checked_target(path_or_uri, filesystem)
    if partition_by is not None and partition_by not in SCHEMA.names:
        raise InvalidArgumentError(
            "partition_by", f"cannot partition by {partition_by!r}: not a column of {SCHEMA.names}")
    if mode not in ("error", "overwrite", "append"):
        raise InvalidArgumentError("mode", f"unknown mode {mode!r}: use error, overwrite or append")
    heads: list[dict[str, Any]] = []
    lock = threading.Lock()

    def keep(head: Head) -> None:
        with lock:
            heads.append(_session_row(head))

    # Every argument is checked, and the store has answered, before anything is deleted:
    # a typo or a missing bucket never empties an export.
    if "on_head" in kwargs:
        raise InvalidArgumentError("on_head", "to_parquet keeps the heads itself (sessions_file)")
    store = _opened(store, kwargs)
    args, named = _sessions_listed(args, kwargs)
    scanned = checked_scan(store, *args, on_head=keep if sessions_file else None, **kwargs)
    filesystem, target = _filesystem_for(path, store, filesystem)
    try:
        check_sessions_exist(store, named, kwargs.get("prefix"))
        clear = check_output(filesystem, target, mode)
        scanned = first_then(scanned)
    except BaseException:
        scanned.close()
        raise

    # Overwrite writes a new directory and replaces the old export with it only once the
    # whole scan is written: a scan failing after its first batch leaves the old one.
    try:
        with output_dir(filesystem, target, clear) as where:
            rows = _write_entries(scanned, filesystem, where, partition_by)
            if sessions_file:
                _write_sessions_file(filesystem, where, heads, mode)
    finally:
        scanned.close()
    return rows


def _sessions_listed(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], Any]:
    """``args`` and ``kwargs`` with the session ids they name (scan's ``sessions``, first of
    its positional arguments) made a list, so they can be read twice; and those ids."""
    def listed(value: Any) -> Any:
        return list(value) if isinstance(value, Iterable) and not isinstance(value, str | bytes) else value

    if args:
        args = (listed(args[0]), *args[1:])
        return args, args[0]
    if "sessions" in kwargs:
        kwargs["sessions"] = listed(kwargs["sessions"])
    return args, kwargs.get("sessions")


def check_sessions_exist(store: ObjectStore, sessions: list[str] | None, prefix: str | None) -> None:
    """:class:`~s3log.SessionNotFound` naming the ``sessions`` (ids an export names, already
    checked) that have no head: a typo fails before anything is written, and leaves an
    export to overwrite as it was. One GET per id."""
    if not sessions:
        return
    from s3log.log import Log

    lg = Log(store, prefix=prefix)
    try:
        found = {row.session for row in lg.heads(list(dict.fromkeys(sessions)))}
    finally:
        lg.close()
    missing = [s for s in dict.fromkeys(sessions) if s not in found]
    if missing:
        raise SessionNotFound(", ".join(missing), "named in sessions, but it has no head: nothing was exported")


def _write_entries(batches: Iterable[pa.RecordBatch], filesystem: Any, where: str, partition_by: str | None) -> int:
    """Write ``batches`` as Parquet files under ``where`` (Hive partitions by ``partition_by``);
    the row count."""
    import pyarrow.dataset as ds

    rows = 0
    failed: list[Exception] = []

    def counted() -> Iterator[pa.RecordBatch]:
        # A scan that fails ends the stream instead of raising into pyarrow: raised there,
        # write_dataset returns while its file uploads may still be in flight, and one
        # landing after the staging directory is deleted would be left behind.
        nonlocal rows
        try:
            for b in batches:
                rows += b.num_rows
                yield b
        except Exception as exc:
            failed.append(exc)

    partitioning = None
    if partition_by is not None:
        partitioning = ds.partitioning(pa.schema([SCHEMA.field(partition_by)]), flavor="hive")
    ds.write_dataset(
        counted(), where, schema=SCHEMA, format="parquet", partitioning=partitioning,
        filesystem=filesystem,
        # A unique name per export: append mode adds files instead of replacing part-0.
        basename_template=f"part-{uuid.uuid4().hex[:12]}-{{i}}.parquet",
        existing_data_behavior="overwrite_or_ignore", max_rows_per_group=65_536,
    )
    if failed:
        raise failed[0]
    return rows


def _write_sessions_file(filesystem: Any, where: str, heads: list[dict[str, Any]], mode: ExportMode) -> None:
    """The rows of the heads a scan read, as ``_sessions.parquet`` under ``where`` (with
    ``append``, a file of a new name beside those of earlier exports)."""
    import pyarrow.parquet as pq

    table = pa.Table.from_batches([_sessions_batch(heads)] if heads else [], schema=SESSIONS_SCHEMA)
    name = "_sessions.parquet" if mode != "append" else f"_sessions-{uuid.uuid4().hex[:12]}.parquet"
    filesystem.create_dir(where, recursive=True)
    pq.write_table(table, f"{where.rstrip('/')}/{name}", filesystem=filesystem)


def _endpoint_of(store: Any) -> str | None:
    """The endpoint a boto3-backed store talks to, so an export goes to the same place."""
    client = getattr(store, "client", None)
    meta = getattr(client, "meta", None)
    url = getattr(meta, "endpoint_url", None)
    if isinstance(url, str) and "amazonaws.com" not in url:
        return url
    return None


def _s3_filesystem(uri: str, endpoint: str | None) -> tuple[Any, str]:
    from pyarrow import fs

    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    kwargs: dict[str, Any] = {"region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        kwargs.update(endpoint_override=host, scheme=scheme)
    return fs.S3FileSystem(**kwargs), uri[len("s3://"):]
