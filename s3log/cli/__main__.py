"""``python -m s3log.cli``: the ``s3log`` command."""

from . import main

main()
