"""The bucket the command-line tests run against (the ``env`` fixture of tests/conftest.py)."""

from __future__ import annotations

import s3log


def log_of(env: dict[str, str], config: s3log.LogConfig | None = None) -> s3log.Log:
    """A log on the bucket and prefix the ``env`` fixture gives the command line."""
    return s3log.Log(s3log.S3Store(env["S3LOG_BUCKET"], endpoint_url=env["AWS_ENDPOINT_URL"]),
                     prefix=env["S3LOG_PREFIX"], config=config)
