"""``python -m s3log``: the ``s3log`` command (the ``cli`` extra), as ``python -m s3log.cli``."""

from s3log._console import main

main()
