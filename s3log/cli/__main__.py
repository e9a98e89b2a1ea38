"""``python -m s3log.cli``: the ``s3log`` command."""

from s3log.cli import main

main()
