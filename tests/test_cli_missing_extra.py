"""Every way of starting the command line names the ``cli`` extra when typer or rich is missing.

The console script ``s3log``, ``python -m s3log.cli`` and ``python -m s3log`` all print
the same one line and exit 2; each is run here as a real ``python -m`` in a fresh
interpreter whose ``sitecustomize`` makes the library unimportable, as if it were not
installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from s3log._console import MISSING_CLI, MISSING_CLI_EXIT

ROOT = Path(__file__).resolve().parents[1]


def _run_module(module: str, tmp_path: Path, blocked: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` from this checkout, with ``blocked`` unimportable (None: nothing)."""
    env = dict(os.environ)
    if blocked is not None:
        # sitecustomize runs at interpreter start, before the module: ``None`` in
        # sys.modules makes ``import blocked`` raise ModuleNotFoundError(name=blocked).
        (tmp_path / "sitecustomize.py").write_text(f"import sys\nsys.modules[{blocked!r}] = None\n")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("module", ["s3log.cli", "s3log"])
@pytest.mark.parametrize("blocked", ["typer", "rich"])
def test_python_m_names_the_cli_extra_when_a_cli_library_is_missing(
    module: str, blocked: str, tmp_path: Path
) -> None:
    out = _run_module(module, tmp_path, blocked, "--help")
    assert out.returncode == MISSING_CLI_EXIT == 2, out.stderr
    assert out.stderr.strip() == MISSING_CLI
    assert "Traceback" not in out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize("module", ["s3log.cli", "s3log"])
def test_python_m_runs_the_cli(module: str, tmp_path: Path) -> None:
    out = _run_module(module, tmp_path, None, "--help")
    assert out.returncode == 0, out.stderr
    assert "Durable, hash-chained session logs on S3" in out.stdout
    assert f"python -m {module}" in out.stdout  # click names the command as it was started


def test_a_broken_cli_module_is_not_mistaken_for_a_missing_extra(tmp_path: Path) -> None:
    # Only typer/rich/click missing is the user's install to fix; s3log's own module
    # failing to import is a bug and keeps its traceback.
    out = _run_module("s3log.cli", tmp_path, "s3log.cli.common", "--help")
    assert out.returncode == 1
    assert "Traceback" in out.stderr and "s3log.cli.common" in out.stderr
    assert MISSING_CLI not in out.stderr
