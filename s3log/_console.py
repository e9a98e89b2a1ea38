"""The ``s3log`` console script: a tiny entry point that imports the CLI only when it runs.

The command line needs typer and rich (the ``cli`` extra). Without them a plain
``ImportError`` traceback would not say what to install; this says it in one line
and exits 1. It imports nothing heavy itself, so ``s3log --help`` costs only the CLI.
"""

from __future__ import annotations

import sys

#: The line printed when typer or rich is missing.
MISSING_CLI = "s3log's command line needs the cli extra: pip install 's3log[cli]'"

_CLI_MODULES = ("typer", "rich", "click")


def main() -> None:
    """Run the ``s3log`` command, or say which extra to install when typer/rich are missing."""
    try:
        from .cli.app import app
    except ImportError as exc:
        # Only a missing CLI library is the user's install to fix; anything else is a bug.
        if (exc.name or "").split(".")[0] not in _CLI_MODULES:
            raise
        print(MISSING_CLI, file=sys.stderr)
        raise SystemExit(1) from None
    app()


if __name__ == "__main__":  # pragma: no cover - ``python -m s3log._console``
    main()
