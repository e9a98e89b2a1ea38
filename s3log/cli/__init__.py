"""The s3log command line (typer and rich: the ``cli`` extra)."""

from __future__ import annotations


def main() -> None:
    """Run the ``s3log`` command; without the ``cli`` extra, name it in one line and exit 2."""
    # The console script's entry point holds the missing-extra message; nothing here
    # imports typer, so ``python -m s3log.cli`` reaches it too.
    from s3log._console import main as console_main

    console_main()
