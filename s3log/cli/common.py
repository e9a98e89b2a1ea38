"""What every command shares: settings on the context, the log, output and errors.

Two rules hold for everything printed here. User data (entry data, meta, session ids,
error messages that quote them) is never interpreted as rich markup: the consoles
have markup, highlighting and emoji turned off and styling is applied with
:class:`rich.text.Text` spans. And output that is not going to a terminal is plain
text, one record per line, never wrapped or truncated, so it can be piped to grep,
awk or a file.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar, cast

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from s3log._format import jsonform
from s3log._format.layout import DEFAULT_PREFIX
from s3log.config import LogConfig, RetryPolicy
from s3log.errors import S3LogError, StoreError

if TYPE_CHECKING:
    from s3log.signing import Verifier

F = TypeVar("F", bound=Callable[..., Any])

#: Markup, highlighting and emoji off: a ``[/INST]`` or ``:smile:`` in user data is text.
console = Console(markup=False, highlight=False, emoji=False)
err_console = Console(stderr=True, markup=False, highlight=False, emoji=False)

#: A person at a terminal wants a quick answer, not 30 s of retries: two attempts
#: within 3 s, then the error (a library caller keeps the patient default).
CLI_RETRY = RetryPolicy(attempts=2, max_time=3.0)

#: Seconds to wait for a TCP connection before calling the endpoint unreachable.
CLI_CONNECT_TIMEOUT = 3

#: On a terminal, entry data longer than this is cut (piped output never is).
TTY_DATA_CHARS = 400


@dataclass
class Settings:
    """Where the sessions are and how to reach them: from options or the environment.

    Lives on the root command context (``ctx.obj``), one per invocation.
    """

    bucket: str | None = None
    prefix: str = DEFAULT_PREFIX
    endpoint_url: str | None = None
    profile: str | None = None
    region: str | None = None
    debug: bool = False
    #: Trusted keys (``--public-key``, ``--kms-key-id``): every read checks head signatures.
    public_keys: tuple[str, ...] = ()
    kms_key_ids: tuple[str, ...] = ()
    #: ``--log-id``: the identity signed heads are bound to (None: ``BUCKET/PREFIX``).
    log_id: str | None = None
    #: ``--data-key``: the keys that unwrap encrypted sessions' data keys.
    data_keys: tuple[str, ...] = ()
    #: The endpoint the store actually talks to (for error messages), once known.
    resolved_endpoint: str | None = None


def active_context() -> typer.Context | None:
    """The context of the command being run, or None outside a command."""
    # typer 0.29 vendors click: its context stack is reached through typer.main.
    ctx = typer.main.get_current_context(silent=True)  # type: ignore[attr-defined]
    return cast("typer.Context | None", ctx)


def current_context() -> typer.Context:
    """The context of the command being run."""
    ctx = active_context()
    if ctx is None:
        raise RuntimeError("no s3log command is running")
    return ctx


def settings(ctx: typer.Context | None = None) -> Settings:
    """The settings of this invocation (from the root command's ``ctx.obj``)."""
    ctx = ctx or current_context()
    found = ctx.find_object(Settings)
    if found is None:  # a command invoked without the root callback (tests of one command)
        found = ctx.ensure_object(Settings)
    return found


def _s3_client(s: Settings) -> Any:
    """A boto3 S3 client for the settings: profile, region, endpoint, short connect timeout."""
    from botocore.config import Config

    from s3log.store._s3common import boto3_session, client_config

    session = boto3_session(profile_name=s.profile, region_name=s.region)
    config = client_config().merge(Config(connect_timeout=CLI_CONNECT_TIMEOUT))
    kwargs: dict[str, Any] = {"config": config}
    if s.endpoint_url:
        kwargs["endpoint_url"] = s.endpoint_url
    return session.client("s3", **kwargs)


def open_log(ctx: typer.Context | None = None) -> Any:
    """A Log over S3Store for this invocation's bucket, prefix and endpoint.

    The log is closed when the command's context closes, whatever happens; commands
    that can also close it themselves (``with command_log(ctx) as log``).
    """
    from s3log.log import Log
    from s3log.store.s3 import S3Store

    ctx = ctx or current_context()
    s = settings(ctx)
    if not s.bucket:
        fail("no bucket: pass --bucket NAME or set S3LOG_BUCKET", 2)
    client = _s3_client(s)
    s.resolved_endpoint = str(client.meta.endpoint_url)
    verifier = verifier_for(s, s.public_keys, s.kms_key_ids)
    config = LogConfig(retry=CLI_RETRY, verifier=verifier, log_id=s.log_id, encryption=encryption_for(s))
    log = Log(S3Store(s.bucket, client=client), prefix=s.prefix, config=config)
    ctx.call_on_close(log.close)
    return log


def encryption_for(s: Settings) -> Any:
    """The encryption ``--data-key`` asks for (None without the option): local wrapping
    keys from ``ID=FILE``, or a KMS key from ``kms:KEY_ID`` (one of the two kinds)."""
    if not s.data_keys:
        return None
    from s3log.encryption import Encryption, KmsKeyProvider, LocalKeyProvider

    kms = [arg[4:] for arg in s.data_keys if arg.startswith("kms:")]
    if kms:
        if len(kms) != len(s.data_keys) or len(kms) > 1:
            fail("--data-key: give one kms:KEY_ID, or local keys (ID=FILE), not both", 2)
        from s3log.store._s3common import boto3_session

        client = boto3_session(profile_name=s.profile, region_name=s.region).client("kms")
        return Encryption(KmsKeyProvider(client, kms[0]))
    keys: dict[str, bytes] = {}
    for arg in s.data_keys:
        key_id, sep, path = arg.partition("=")
        if not sep or not key_id:
            fail(f"--data-key {arg!r}: expected ID=FILE or kms:KEY_ID", 2)
        try:
            raw = Path(path).read_bytes()
            keys[key_id] = raw if len(raw) == 32 else bytes.fromhex(raw.strip().decode("ascii"))
        except (OSError, ValueError) as exc:
            fail(f"--data-key {arg!r}: cannot read a 32-byte key (raw or hex) from {path}: {exc}", 2)
    return Encryption(LocalKeyProvider(keys, current=next(iter(keys))))


def verifier_for(s: Settings, public_keys: Sequence[str], kms_key_ids: Sequence[str]) -> Verifier | None:
    """The verifier these key options ask for (None: signatures are not checked).

    ``public_keys``: PEM files, or ``KEY_ID=FILE`` for a key exported from KMS (heads
    name it by the KMS key's id); ``kms_key_ids``: keys verified with kms:Verify.
    """
    from s3log.signing import AnyVerifier, KmsVerifier, PublicKeyVerifier

    verifiers: list[Verifier] = []
    if public_keys:
        sources: list[str | tuple[str, str]] = []
        for arg in public_keys:
            # KEY_ID=FILE binds a key to the id heads name it by (a KMS key's ARN has no '=').
            key_id, sep, path = arg.partition("=")
            sources.append((key_id, path) if sep and not os.path.exists(arg) else arg)
        verifiers.append(PublicKeyVerifier.from_pem(*sources))
    if kms_key_ids:
        from s3log.store._s3common import boto3_session

        # No endpoint of its own: AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_KMS apply, --endpoint-url is S3's.
        client = boto3_session(profile_name=s.profile, region_name=s.region).client("kms")
        verifiers.append(KmsVerifier(client, list(kms_key_ids)))
    if not verifiers:
        return None
    return verifiers[0] if len(verifiers) == 1 else AnyVerifier(*verifiers)


@contextmanager
def command_log(ctx: typer.Context | None = None) -> Iterator[Any]:
    """``open_log`` as a context manager: the log is closed when the block ends."""
    log = open_log(ctx)
    try:
        yield log
    finally:
        log.close()


# ------------------------------------------------------------------------------ output


def is_tty(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (stdout by default) is a terminal."""
    stream = stream or sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def echo(text: str | Text = "", *, err: bool = False) -> None:
    """Print one line: styled on a terminal, plain and unwrapped otherwise.

    A ``str`` is always printed literally (never as markup).
    """
    stream = sys.stderr if err else sys.stdout
    if is_tty(stream):
        (err_console if err else console).print(text, soft_wrap=True)
        return
    stream.write((text.plain if isinstance(text, Text) else text) + "\n")
    # Flushed per line: ``tail --follow`` and ``local-s3`` are read line by line by
    # another process while they keep running.
    stream.flush()


def print_table(header: list[str], rows: list[list[str]], *, keep_whole: tuple[int, ...] = (),
                tty_rows: list[list[str]] | None = None, right: tuple[int, ...] = ()) -> None:
    """A table: on a terminal, columns fitted to its width; piped, columns padded to the widest
    cell, two spaces apart, nothing cut.

    On a terminal no column is dropped or cut: a column too wide for its share folds
    onto more lines. ``keep_whole`` columns (ids to copy) are never folded while the
    others can still fit beside them. ``tty_rows``: the cells shown on a terminal, when
    they differ from the piped ones (shorter times); ``right``: right-aligned columns.
    """
    if not is_tty():
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for r in [header, *rows]:
            echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        return
    from rich import box

    cells = rows if tty_rows is None else tty_rows
    # One space between columns and none at the edges: an 80-column terminal holds a
    # 36-character id, the counts, two times folded to date and time, and a parent.
    table = Table(*header, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0)
    fitted = _column_widths(header, cells, (*keep_whole, *right), console.width)
    for i, col in enumerate(table.columns):
        col.overflow = "fold"
        col.width = None if fitted is None else fitted[i]
        col.no_wrap = fitted is not None and (i in keep_whole or i in right)
        if i in right:
            col.justify = "right"
    for r in cells:
        table.add_row(*(Text(c) for c in r))  # Text: a cell is never markup
    console.print(table)


#: The narrowest a folding table column gets while there is room (a date, ``2026-11-30``).
FOLD_WIDTH = 10
#: ... and when there is not, before the columns kept whole are folded too.
NARROW_FOLD_WIDTH = 4


def _column_widths(header: list[str], cells: list[list[str]], whole: tuple[int, ...],
                   width: int) -> list[int] | None:
    """Each column's width on a terminal ``width`` wide, or None when rich's own layout
    will do (everything fits, or not even the ``whole`` columns do: then all fold).

    Columns not kept whole start from ``FOLD_WIDTH`` (a date), the last ones narrowed
    first down to their header's word (never folded) or ``NARROW_FOLD_WIDTH``; what is
    left is shared out left to right up to each column's widest cell. (Rich's own
    shrinking ignores a column's minimum and can cut a folded cell.)
    """
    n = len(header)
    widest = [max([len(header[i]), *(len(r[i]) for r in cells)]) for i in range(n)]
    room = width - (n - 1)  # one space between columns
    if sum(widest) <= room:
        return None
    widths = [widest[i] if i in whole else max(len(header[i]), min(widest[i], FOLD_WIDTH)) for i in range(n)]
    for i in reversed(range(n)):
        over = sum(widths) - room
        if over > 0 and i not in whole:
            widths[i] -= min(over, max(0, widths[i] - max(NARROW_FOLD_WIDTH, len(header[i]))))
    if sum(widths) > room:
        return None
    for i in range(n):
        widths[i] += min(room - sum(widths), widest[i] - widths[i])
    return widths


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line from literal strings and ``(text, style)`` pairs; nothing is parsed as markup."""
    return Text.assemble(*parts)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def when(ms: int | None) -> str:
    """Milliseconds since the epoch as ISO 8601 UTC with milliseconds: ``2026-11-30T09:40:00.123Z``.

    A time no date can show (before year 1 or after 9999: a stored head or entry may
    hold any integer, docs/format.md) is printed as its integer, ``ms:<n>``.
    """
    if ms is None:
        return "-"
    try:
        # Integer arithmetic (no float, no C time_t): one range on every platform.
        return (_EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, TypeError):
        return f"ms:{ms}"


def when_short(ms: int | None) -> str:
    """A time as a terminal table shows it: ``2026-11-30 09:40:00Z`` (seconds; the
    space lets a narrow column fold it into date and time). Piped output and --json
    keep :func:`when`'s milliseconds."""
    text = when(ms)
    if len(text) == 24 and text[10] == "T":
        return f"{text[:10]} {text[11:19]}Z"
    return text


def jsonable(value: Any) -> Any:
    """``value`` with every part JSON can hold, by the one rule of :mod:`s3log._format.jsonform`:
    bytes as hex, NaN and infinities as null, integers past ``str()``'s limit as hex text,
    map keys as text (the rule ``data_json`` and the jsonl export follow too)."""
    return jsonform.plain(value)


def dumps(value: Any) -> str:
    """Data as one line of JSON (bytes as hex): how ``show`` and ``tail`` print entries."""
    return jsonform.dumps(value)


def cell(value: Any) -> Any:
    """A query result's value in JSON: a timestamp as ``show`` prints times
    (``2026-11-30T09:40:00.123Z``, UTC), anything else by :func:`jsonable`."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        utc = value.astimezone(UTC)
        spec = "milliseconds" if utc.microsecond % 1000 == 0 else "microseconds"
        return utc.isoformat(timespec=spec).replace("+00:00", "Z")
    return jsonable(value)


def cell_text(value: Any) -> str:
    """A query result's value in a table: :func:`cell`'s text (a time, bytes as hex) as it
    is, anything else its JSON (``null``, ``1.5``, ``{"a": 1}``)."""
    shown = cell(value)
    return shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False, allow_nan=False)


def emit_json(obj: Any) -> None:
    """Print JSON for scripts."""
    sys.stdout.write(json.dumps(jsonable(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    sys.stdout.flush()


# ------------------------------------------------------------------------------ errors


def one_line(message: str) -> str:
    """A message on one line: newlines and runs of blanks become one space."""
    return " ".join(message.split())


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one clear line to stderr and exit non-zero."""
    echo(styled(("error:", "bold red"), " ", one_line(message)), err=True)
    raise typer.Exit(code)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def explain(exc: BaseException, s: Settings) -> str:
    """The one line a person needs for a failure: the bucket or endpoint at fault, by name."""
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, NoCredentialsError

    endpoint = s.endpoint_url or s.resolved_endpoint or "the default S3 endpoint"
    for cause in _causes(exc):
        if isinstance(cause, StoreError) and cause.code == "NoSuchBucket":
            return (f"bucket {s.bucket} does not exist at {endpoint} "
                    f"(create it, or run a local S3 with: s3log local-s3 --bucket {s.bucket})")
        if (isinstance(cause, StoreError) and cause.status == 404 and cause.code != "NoSuchKey"
                and (cause.key or "").endswith("/")):
            # A LIST answered 404 without NoSuchBucket: not S3's bucket, or not S3 at all.
            return f"bucket {s.bucket} not found at {endpoint} (HTTP 404 listing {cause.key}): check the endpoint"
        if isinstance(cause, (EndpointConnectionError, ConnectTimeoutError)):
            # botocore's text repeats a long request URL; the endpoint is what to check.
            return (f"could not reach the S3 endpoint {endpoint} ({type(cause).__name__}): "
                    "check --endpoint-url / AWS_ENDPOINT_URL and that the server is running")
        if isinstance(cause, NoCredentialsError):
            return ("no AWS credentials found: set AWS_PROFILE (or --profile), "
                    "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    if isinstance(exc, (S3LogError, OSError, ValueError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (``s3log show SID | head -1``).

    Asked of the descriptor, not of the error: a BrokenPipeError from a socket to the
    store is a failure to report, not a reader that has seen enough.
    """
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no descriptor (a test runner's buffer), no poll()
        return False


def quit_quietly() -> NoReturn:
    """Exit 0 without a word once the reader of stdout has gone, as coreutils and the aws cli do.

    stdout is pointed at /dev/null first (the Python documentation's recipe for
    SIGPIPE): the flush at interpreter exit would otherwise fail on the same pipe.
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    raise typer.Exit(0)


def handle_errors(fn: F) -> F:
    """Turn s3log and store errors into one line and exit code 1 (tracebacks with --debug).

    A reader of stdout that went away (a pipe into ``head``) ends the command quietly with 0.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.BadParameter):
            raise
        except Exception as exc:  # botocore credential/config errors and the like too
            if isinstance(exc, BrokenPipeError) and stdout_gone():
                quit_quietly()
            ctx = active_context()
            s = settings(ctx) if ctx is not None else Settings()
            if s.debug:
                raise
            fail(explain(exc, s))

    return cast(F, wrapper)  # functools.wraps: the same signature as fn
