"""The bucket the command-line tests run against (the ``env`` fixture of tests/conftest.py), and
helpers to run the command line and edit stored heads under it."""

from __future__ import annotations

import json
from typing import Any

import cbor2
from typer.testing import CliRunner

import s3log
from s3log.cli.app import app
from s3log.testing.plugin import LocalS3


def log_of(env: dict[str, str], config: s3log.LogConfig | None = None) -> s3log.Log:
    """A log on the bucket and prefix the ``env`` fixture gives the command line."""
    return s3log.Log(s3log.S3Store(env["S3LOG_BUCKET"], endpoint_url=env["AWS_ENDPOINT_URL"]),
                     prefix=env["S3LOG_PREFIX"], config=config)


def invoke(env: dict[str, str], *args: str) -> Any:
    """``s3log ARGS`` through typer's runner, with ``env`` as the environment."""
    return CliRunner().invoke(app, list(args), env=env)


def strict_json(text: str) -> Any:
    """JSON as a strict parser reads it: NaN, Infinity and -Infinity are not JSON."""
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def no_python_error(result: Any) -> None:
    """The command ended with a message of its own, not a traceback or a raw OS error."""
    assert "Traceback" not in result.output and "Errno" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)


def edit_head_s3(env: dict[str, str], s3log_server: LocalS3, sid: str, change: dict[str, Any]) -> str:
    """Rewrite the fields ``change`` names in ``sid``'s head on the bucket; returns its key."""
    key = f"s3log/sessions/{sid}/head"
    client = s3log_server.client()
    head = cbor2.loads(client.get_object(Bucket=env["S3LOG_BUCKET"], Key=key)["Body"].read())
    client.put_object(Bucket=env["S3LOG_BUCKET"], Key=key, Body=cbor2.dumps({**head, **change}, canonical=True))
    return key


def edit_head_mem(store: s3log.MemoryStore, sid: str, change: dict[str, Any]) -> str:
    """Rewrite the fields ``change`` names in ``sid``'s head in ``store``; returns its key."""
    key = f"s3log/sessions/{sid}/head"
    head = cbor2.loads(store.get(key).body)
    store.put_raw(key, cbor2.dumps({**head, **change}, canonical=True))
    return key
