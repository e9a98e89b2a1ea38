"""The ``s3log`` command: global options, help layout, and the command groups."""

from __future__ import annotations

import weakref
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from s3log import __version__
from s3log._format.layout import DEFAULT_PREFIX
from s3log.cli.common import (
    Settings,
    command_log,
    console,
    emit_json,
    err_console,
    fail,
    handle_errors,
    open_log,
    settings,
)

__all__ = [
    "Settings", "app", "command_log", "console", "emit_json", "err_console", "fail", "handle_errors", "open_log",
    "settings",
]

#: Help panels, in the order ``s3log --help`` shows them, and the commands in each.
PANELS: dict[str, tuple[str, ...]] = {
    "Read sessions": ("ls", "show", "tail", "lineage"),
    "Change sessions": ("fork", "rm"),
    "Check and clean up": ("verify", "gc", "expire", "doctor"),
    "Analytics": ("export", "query"),
    "Try it locally": ("local-s3", "demo"),
}
_PANEL_OF = {name: panel for panel, names in PANELS.items() for name in names}
_ORDER = [name for names in PANELS.values() for name in names]


def _tidy(cmd: Any, ctx: Any) -> None:
    """Help that reads well: a value's metavar names what it is (never ``<str>`` or
    ``<list[str]>``), flags show none, paragraphs wrap to the terminal rather than at
    the docstring's line ends, and RST literals are plain quotes."""
    for param in [*cmd.params, cmd.get_help_option(ctx)]:
        if isinstance(param, TyperArgument):
            # Its name is shown already; its type would be a Python one (``<str>``).
            param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
        if param is None or param.metavar is not None:
            continue
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""  # a flag takes no value: show none
        elif not param.type_descriptor.is_choice:  # a choice lists its values
            flag = next((o for o in param.opts if o.startswith("--")), None)
            param.metavar = (flag[2:] if flag else param.name or "value").replace("-", "_").upper()
    if cmd.help:
        # Docstrings mark literals the RST way for the API docs; help is not RST. A
        # docstring's line breaks are for the source: rich keeps them, cutting
        # sentences mid-line, so each paragraph becomes one line to wrap.
        paragraphs = cmd.help.replace("``", "'").split("\n\n")
        cmd.help = "\n\n".join(" ".join(p.split()) for p in paragraphs)


#: The commands whose help is already tidied (get_command runs once per lookup).
_TIDIED: weakref.WeakSet[Any] = weakref.WeakSet()


class S3logGroup(TyperGroup):
    """The root group: commands in panels, in panel order, with tidy help."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command, placed in its help panel."""
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None and cmd not in _TIDIED:
            # An unset panel is typer's falsy DefaultPlaceholder, not None.
            if (isinstance(cmd, TyperCommand | TyperGroup) and not isinstance(cmd.rich_help_panel, str)
                    and cmd_name in _PANEL_OF):
                cmd.rich_help_panel = _PANEL_OF[cmd_name]
            _tidy(cmd, ctx)
            _TIDIED.add(cmd)
        return cmd

    def list_commands(self, ctx: Any) -> list[str]:
        """Commands in panel order (unknown ones last)."""
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: _ORDER.index(n) if n in _ORDER else len(_ORDER))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """The root help, its own flags tidied first."""
        if not getattr(self, "_s3log_tidy", False):
            _tidy(self, ctx)
            self._s3log_tidy = True
        super().format_help(ctx, formatter)


app = typer.Typer(
    cls=S3logGroup,
    help="Durable, hash-chained session logs on S3.",
    no_args_is_help=True,
    add_completion=False,
    # Errors are one line (handle_errors); --debug re-raises for a plain traceback.
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"s3log {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    bucket: str = typer.Option(
        None, "--bucket", envvar="S3LOG_BUCKET", metavar="NAME", help="Bucket holding the sessions."
    ),
    prefix: str = typer.Option(
        DEFAULT_PREFIX, "--prefix", envvar="S3LOG_PREFIX", metavar="PREFIX", help="Key prefix of the sessions."
    ),
    endpoint_url: str = typer.Option(
        None, "--endpoint-url", envvar="AWS_ENDPOINT_URL", metavar="URL",
        help="S3-compatible endpoint (moto, MinIO, LocalStack).",
    ),
    profile: str = typer.Option(
        None, "--profile", metavar="NAME", help="AWS profile for credentials and region (default: AWS_PROFILE)."
    ),
    region: str = typer.Option(None, "--region", metavar="REGION", help="AWS region (default: from the profile)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
    public_keys: list[str] = typer.Option(
        None, "--public-key", metavar="FILE|KEY_ID=FILE",
        help="Trust heads signed by this PEM public key (repeatable; KEY_ID= for a key exported from KMS): "
             "every command then refuses (or skips, scanning) a session whose head it did not sign."),
    kms_key_ids: list[str] = typer.Option(
        None, "--kms-key-id", metavar="ID", help="Trust heads signed by this KMS key (repeatable; kms:Verify)."),
    data_keys: list[str] = typer.Option(
        None, "--data-key", metavar="ID=FILE|kms:KEY_ID",
        help="Decrypt encrypted sessions: ID=FILE a 32-byte wrapping key (raw, or 64 hex digits) a "
             "LocalKeyProvider names ID (repeatable), or kms:KEY_ID a KMS key (kms:Decrypt)."),
    log_id: str = typer.Option(
        None, "--log-id", envvar="S3LOG_LOG_ID", metavar="ID",
        help="The identity signed heads are checked against (default BUCKET/PREFIX); a copy of a whole log "
             "names its original's."),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, expose_value=False, help="Print the version."
    ),
) -> None:
    ctx.obj = Settings(bucket=bucket, prefix=prefix, endpoint_url=endpoint_url, profile=profile, region=region,
                       debug=debug, public_keys=tuple(public_keys or ()), kms_key_ids=tuple(kms_key_ids or ()),
                       log_id=log_id, data_keys=tuple(data_keys or ()))


from s3log.cli import export, maintenance, sessions  # noqa: E402,F401  (registers the commands)
