"""The pytest plugin as users get it (entry point ``pytest11``), run with pytester.

The fixtures must make real AWS unreachable: code under test that builds its own
store or client from the environment talks to the local server, whatever
credentials, profile or endpoint the developer's shell had.
"""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["pytester"]

REAL_KEY = "AKIAREALLOOKINGKEY01"


@pytest.fixture
def real_looking_env(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> dict[str, str]:
    """A developer shell: production credentials, a profile, and a config file naming an endpoint."""
    config = os.path.join(tmp_path, "aws-config")
    with open(config, "w") as f:
        f.write("[profile prod]\nregion = eu-west-1\nendpoint_url = https://s3.eu-west-1.amazonaws.com\n")
    env = {
        "AWS_ACCESS_KEY_ID": REAL_KEY,
        "AWS_SECRET_ACCESS_KEY": "realSecretDoNotUse0000000000000000000000",
        "AWS_SESSION_TOKEN": "realSessionToken",
        "AWS_PROFILE": "prod",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_CONFIG_FILE": config,
        "AWS_SHARED_CREDENTIALS_FILE": config,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # Whatever an earlier s3log_server of this session set is not the developer's.
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "S3LOG_BUCKET", "AWS_REGION", "AWS_EC2_METADATA_DISABLED"):
        monkeypatch.delenv(key, raising=False)
    return env


USER_TESTS = f'''
import os

import boto3
import s3log
import s3log.testing.plugin


def test_the_plugin_came_from_the_entry_point(request):
    assert request.config.pluginmanager.get_plugin("s3log") is s3log.testing.plugin


def test_a_store_built_from_the_environment_reaches_the_local_server(s3log_server, s3log_bucket):
    assert os.environ["AWS_ACCESS_KEY_ID"] != {REAL_KEY!r}
    assert "AWS_PROFILE" not in os.environ
    assert not os.path.exists(os.environ["AWS_CONFIG_FILE"])
    assert os.environ["AWS_ENDPOINT_URL"] == os.environ["AWS_ENDPOINT_URL_S3"] == s3log_server.endpoint_url
    assert os.environ["S3LOG_BUCKET"] == s3log_bucket

    before = s3log_server.request_count
    log = s3log.Log(s3log.S3Store(os.environ["S3LOG_BUCKET"]))   # what user code does
    w = log.create()
    w.append("k", 1)
    w.commit()
    assert s3log_server.request_count > before
    listed = s3log_server.client().list_objects_v2(Bucket=s3log_bucket)["Contents"]
    assert [o["Key"] for o in listed if "/sessions/" in o["Key"] and "_probe" not in o["Key"]] == [
        f"s3log/sessions/{{w.session_id}}/head"]
    log.close()


def test_a_plain_boto3_client_gets_fake_credentials_and_the_local_endpoint(s3log_server, s3log_bucket):
    client = boto3.client("s3")
    assert client.meta.endpoint_url == s3log_server.endpoint_url
    assert client._request_signer._credentials.access_key == "testing"
    client.put_object(Bucket=s3log_bucket, Key="x", Body=b"1")
    assert s3log_server.client().get_object(Bucket=s3log_bucket, Key="x")["Body"].read() == b"1"


def test_each_test_gets_its_own_bucket_in_the_environment(s3log_bucket):
    assert os.environ["S3LOG_BUCKET"] == s3log_bucket
'''


def test_fixtures_make_real_aws_unreachable_and_restore_the_environment(
    pytester: pytest.Pytester, real_looking_env: dict[str, str]
) -> None:
    pytester.makepyprojecttoml(ASYNC_SETTINGS)
    pytester.makepyfile(test_user=USER_TESTS)
    def env_now() -> dict[str, str]:
        # The inner pytest run manages PYTEST_CURRENT_TEST itself.
        return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}

    before = env_now()
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=4)
    # Afterwards the developer's environment is exactly as it was.
    assert env_now() == before
    for key, value in real_looking_env.items():
        assert os.environ.get(key) == value, key
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "S3LOG_BUCKET", "AWS_EC2_METADATA_DISABLED"):
        assert key not in os.environ, key


ASYNC_SETTINGS = """
[tool.pytest.ini_options]
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "function"
"""

ASYNC_TESTS = '''
import os


async def test_async_fixture(s3log_async_log, s3log_bucket, s3log_server):
    w = await s3log_async_log.create()
    await w.append_durable("k", 1)
    assert os.environ["S3LOG_BUCKET"] == s3log_bucket
    listed = s3log_server.client().list_objects_v2(Bucket=s3log_bucket)["Contents"]
    assert [o["Key"] for o in listed if "/sessions/" in o["Key"] and "_probe" not in o["Key"]] == [
        f"s3log/sessions/{w.session_id}/head"]
'''


def test_the_async_fixture_with_the_readme_setting(pytester: pytest.Pytester, real_looking_env: dict[str, str]) -> None:
    # The setting the README gives for async fixtures (pytest-asyncio).
    pytester.makepyprojecttoml(ASYNC_SETTINGS)
    pytester.makepyfile(test_user_async=ASYNC_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)


def test_the_async_fixture_with_the_marker_in_strict_mode(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\nasyncio_mode = "strict"\nasyncio_default_fixture_loop_scope = "function"\n'
    )
    marked = ASYNC_TESTS.replace("import os\n", "import os\n\nimport pytest\n").replace(
        "async def test_async_fixture", "@pytest.mark.asyncio\nasync def test_async_fixture"
    )
    pytester.makepyfile(test_user_async=marked)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)


def _readme_section(title: str) -> str:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = text.index(f"## {title}")
    return text[start:text.index("\n## ", start + 1)]


def test_the_readme_testing_section_runs_as_written(
    pytester: pytest.Pytester, real_looking_env: dict[str, str]
) -> None:
    import re

    section = _readme_section("Testing your code against s3log")
    python = re.findall(r"```python\n(.*?)```", section, re.S)
    toml = re.findall(r"```toml\n(.*?)```", section, re.S)
    assert len(python) == 2 and len(toml) == 1
    pytester.makepyprojecttoml(toml[0])
    pytester.makepyfile(test_readme_one=python[0], test_readme_two=python[1])
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)
