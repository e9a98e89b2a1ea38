"""The s3log command line."""

from __future__ import annotations


def main() -> None:
    """Entry point of the ``s3log`` console script."""
    from .app import app

    app()
