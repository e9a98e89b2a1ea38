"""The arguments a store constructor checks before it builds a client or sends anything:
the bucket, the endpoint URL and the region, each an :class:`~s3log.InvalidArgumentError`
naming it. Lenient where stores differ (old us-east-1 bucket names, the regions of
S3-compatible services): what is refused can name no bucket, endpoint or region at all.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from s3log.errors import InvalidArgumentError

# What boto3 itself accepts as a bucket name (lenient enough for old us-east-1 buckets),
# or an access point ARN, which boto3 takes in its place.
BUCKET_NAME = re.compile(r"[A-Za-z0-9._-]{1,255}")
_ARN = re.compile(r"arn:[a-z-]+:s3[a-z-]*:\S+")
# What botocore accepts as a region name.
_REGION = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def check_bucket(bucket: object, argument: str = "bucket") -> str:
    """``bucket``, if it can name a bucket; else InvalidArgumentError naming ``argument``."""
    if isinstance(bucket, str) and (BUCKET_NAME.fullmatch(bucket) or _ARN.fullmatch(bucket)):
        return bucket
    hint = ""
    if isinstance(bucket, str) and "://" in bucket:
        hint = ": give the bucket's name alone (s3log.open_log takes a log URL)"
    elif isinstance(bucket, str) and "/" in bucket:
        hint = ": a key prefix belongs to the log, Log(store, prefix=...)"
    raise InvalidArgumentError(
        argument, f"{bucket!r} is not a bucket name (1 to 255 letters, digits, '.', '-' and '_'){hint}")


def check_endpoint(endpoint: object, argument: str = "endpoint_url") -> str | None:
    """``endpoint`` (None or empty: the default endpoint), if it is an http:// or https://
    URL with a host; else InvalidArgumentError naming ``argument``."""
    if endpoint is None or endpoint == "":
        return None
    if isinstance(endpoint, str):
        try:
            parts = urlsplit(endpoint)
            _ = parts.port  # a port that is not a number raises here
        except ValueError:
            parts = None
        if parts is not None and parts.scheme in ("http", "https") and parts.hostname:
            return endpoint
    raise InvalidArgumentError(
        argument, f"{endpoint!r} is not an http:// or https:// URL with a host (such as http://127.0.0.1:9000)")


def check_region(region: object, argument: str = "region_name") -> str | None:
    """``region`` (None or empty: the default region), if it can name a region; else
    InvalidArgumentError naming ``argument``."""
    if region is None or region == "":
        return None
    if isinstance(region, str) and _REGION.fullmatch(region):
        return region
    raise InvalidArgumentError(
        argument, f"{region!r} is not a region name (letters, digits and hyphens, such as us-east-1)")
