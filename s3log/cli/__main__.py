"""``python -m s3log.cli``."""

from . import main

main()
