"""The ``s3log`` command's entry point: imports the CLI only when it runs.

The console script ``s3log``, ``python -m s3log`` and ``python -m s3log.cli`` all come
here. The command line needs typer and rich (the ``cli`` extra). Without them a plain
``ImportError`` traceback would not say what to install; this says it in one line and
exits 2. It imports nothing heavy itself, so ``s3log --help`` costs only the CLI.
"""

from __future__ import annotations

import sys

#: The line printed when typer or rich is missing.
MISSING_CLI = "s3log's command line needs the cli extra: pip install 's3log[cli]'"

#: The exit code then: the command could not run as invoked, like a usage error (2), so
#: a script reading exit 1 as "an operation failed" (``s3log verify`` found a broken
#: chain) does not take a missing install for one.
MISSING_CLI_EXIT = 2

_CLI_MODULES = ("typer", "rich", "click")


def main() -> None:
    """Run the ``s3log`` command, or say which extra to install when typer/rich are missing."""
    try:
        from s3log.cli.app import app
    except ImportError as exc:
        # Only a missing CLI library is the user's install to fix; anything else is a bug.
        if (exc.name or "").split(".")[0] not in _CLI_MODULES:
            raise
        print(MISSING_CLI, file=sys.stderr)
        raise SystemExit(MISSING_CLI_EXIT) from None
    app()


if __name__ == "__main__":  # pragma: no cover - ``python -m s3log._console``
    main()
