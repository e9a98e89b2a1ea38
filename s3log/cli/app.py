"""The ``s3log`` command: shared options, error handling, and the command groups."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import typer
from rich.console import Console

from ..errors import S3LogError
from ..layout import DEFAULT_PREFIX

app = typer.Typer(help="Durable, hash-chained session logs on S3.", no_args_is_help=True, add_completion=False)
console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Settings:
    """Where the sessions are: from options or S3LOG_* / AWS_* environment variables."""

    bucket: str | None
    prefix: str
    endpoint_url: str | None
    debug: bool


_settings = Settings(None, DEFAULT_PREFIX, None, False)


@app.callback()
def _main(
    bucket: str = typer.Option(None, "--bucket", envvar="S3LOG_BUCKET", help="Bucket holding the sessions."),
    prefix: str = typer.Option(DEFAULT_PREFIX, "--prefix", envvar="S3LOG_PREFIX", help="Key prefix of the sessions."),
    endpoint_url: str = typer.Option(
        None, "--endpoint-url", envvar="AWS_ENDPOINT_URL", help="S3-compatible endpoint (moto, MinIO...)."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    _settings.bucket = bucket
    _settings.prefix = prefix
    _settings.endpoint_url = endpoint_url
    _settings.debug = debug


def settings() -> Settings:
    """The options of this invocation."""
    return _settings


def open_log() -> Any:
    """A Log over S3Store for the configured bucket/prefix/endpoint."""
    from ..log import Log
    from ..store.s3 import S3Store

    if not _settings.bucket:
        raise typer.BadParameter("no bucket: pass --bucket or set S3LOG_BUCKET")
    return Log(S3Store(_settings.bucket, endpoint_url=_settings.endpoint_url), prefix=_settings.prefix)


def fail(message: str, code: int = 1) -> None:
    """Print one clear line to stderr and exit non-zero."""
    err_console.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def handle_errors(fn: F) -> F:
    """Turn s3log and store errors into one line and exit code 1 (tracebacks with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.BadParameter):
            raise
        except (S3LogError, OSError, ValueError) as exc:
            if _settings.debug:
                raise
            fail(str(exc))
        except Exception as exc:  # botocore credential/config errors and the like
            if _settings.debug:
                raise
            fail(f"{type(exc).__name__}: {exc}")

    return wrapper  # type: ignore[return-value]


def emit_json(obj: Any) -> None:
    """Print JSON for scripts."""
    sys.stdout.write(json.dumps(obj, default=_jsonable, indent=2) + "\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


from . import export, maintenance, sessions  # noqa: E402,F401  (registers the commands)
