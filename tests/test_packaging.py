"""Packaging: version ranges, the pinned dev set, lazy imports, and extras that name themselves."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import s3log
from s3log._console import MISSING_CLI
from s3log._extras import EXTRAS, extra, require
from s3log.errors import MissingExtraError

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that imports this checkout's s3log."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def _constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt line {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


def test_the_core_is_boto3_and_cbor2_as_ranges() -> None:
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    assert sorted(r.name for r in reqs) == ["boto3", "cbor2"]
    for r in reqs:
        # A range admits more than one release, so an application's own pin can fit.
        assert not any(s.operator in ("==", "===") for s in r.specifier), r
        assert any(s.operator == ">=" for s in r.specifier), f"{r} has no lower bound"


def test_every_extra_is_declared_and_none_pins_exactly() -> None:
    extras = PROJECT["optional-dependencies"]
    assert set(EXTRAS) | {"test", "dev", "bench", "compare"} == set(extras)
    for name, reqs in extras.items():
        for text in reqs:
            r = Requirement(text)
            assert not any(s.operator == "==" for s in r.specifier), f"extra {name}: {text}"


def test_the_pinned_dev_set_satisfies_every_declared_range() -> None:
    pins = _constraints()
    declared = [*PROJECT["dependencies"], *(r for reqs in PROJECT["optional-dependencies"].values() for r in reqs)]
    checked = 0
    for text in declared:
        r = Requirement(text)
        pinned = pins.get(canonicalize_name(r.name))
        if r.name == "s3log":
            continue
        assert pinned is not None, f"{r.name} is not pinned in constraints.txt"
        assert r.specifier.contains(pinned, prereleases=True), f"constraints.txt pins {r.name}=={pinned}, outside {r}"
        checked += 1
    assert checked > 20


def test_license_is_an_spdx_expression_and_setuptools_can_read_it() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    build = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    setuptools = next(r for r in build if r.name == "setuptools")
    # setuptools reads PEP 639 license strings from 77 on.
    assert not setuptools.specifier.contains("76.1.0") and setuptools.specifier.contains("77.0.3")


def test_make_install_uses_the_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert 'pip install -q -c constraints.txt -e ".[test,dev]"' in makefile


def test_import_s3log_loads_no_optional_or_heavy_library() -> None:
    heavy = ["boto3", "botocore", "aioboto3", "aiobotocore", "rich", "typer", "click", "pyarrow", "duckdb",
             "pandas", "dask", "obstore", "moto", "langgraph", "agents"]
    out = _run(f"""
        import json, sys
        import s3log
        print(json.dumps([m for m in {heavy!r} if m in sys.modules]))
    """)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_lazy_names_still_resolve() -> None:
    for name in ("Log", "Writer", "S3Store", "AsyncLog", "open_log", "open_async_log"):
        assert name in s3log.__all__ and getattr(s3log, name) is not None
    assert "open_log" in dir(s3log)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = s3log.nope  # type: ignore[attr-defined]


def test_console_script_names_the_cli_extra_when_typer_is_missing() -> None:
    assert PROJECT["scripts"]["s3log"] == "s3log._console:main"
    for blocked in ("typer", "rich"):
        out = _run(f"""
            import sys
            sys.modules[{blocked!r}] = None    # as if it were not installed
            sys.argv = ["s3log", "--help"]
            from s3log._console import main
            main()
        """)
        assert out.returncode == 2  # not 1, which the CLI's own failures (a broken chain) return
        assert out.stderr.strip() == MISSING_CLI
        assert "Traceback" not in out.stderr


def test_console_script_runs_the_cli() -> None:
    out = _run("""
        import sys
        sys.argv = ["s3log", "--help"]
        from s3log._console import main
        main()
    """)
    assert out.returncode == 0, out.stderr
    assert "Durable, hash-chained session logs on S3" in out.stdout


def test_require_and_extra_helpers() -> None:
    assert require("json", "analytics") is json
    with pytest.raises(MissingExtraError) as info:
        require("s3log_no_such_module", "fast")
    err = info.value
    assert isinstance(err, ImportError) and isinstance(err, s3log.S3LogError)
    assert (err.module, err.extra, err.name) == ("s3log_no_such_module", "fast", "s3log_no_such_module")
    with pytest.raises(MissingExtraError, match=r"pip install 's3log\[langgraph\]'"), extra("langgraph"):
        import s3log_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    with pytest.raises(ValueError, match="unknown s3log extra 'cli2'"):
        require("json", "cli2")
