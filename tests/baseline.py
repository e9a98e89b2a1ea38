"""An earlier build of s3log, extracted from git history and imported beside this tree's.

Differential tests compare this tree with the build before a change: decode_head's
field checks, the collector pause and the scan's owner columns are checked against
:data:`BASELINE_COMMIT`, the last commit before the one-comparison head check, the
class-based collector pause and the scan's one owner value per session.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BASELINE_COMMIT = "02311d6"
BASELINE_NAME = "s3log_baseline"
ROOT = Path(__file__).resolve().parent.parent


def import_baseline(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The s3log package as of :data:`BASELINE_COMMIT`, imported as :data:`BASELINE_NAME`
    (its imports inside the package are relative, so it uses only its own modules).
    Skips the test where the git history does not hold that commit."""
    if BASELINE_NAME in sys.modules:
        return sys.modules[BASELINE_NAME]
    dest = tmp_path_factory.mktemp("baseline")
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", BASELINE_COMMIT, "s3log"],
                                 check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # not a git checkout holding it
        pytest.skip(f"cannot extract {BASELINE_COMMIT}: {exc}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    pkg = dest / "s3log"
    spec = importlib.util.spec_from_file_location(BASELINE_NAME, pkg / "__init__.py",
                                                  submodule_search_locations=[str(pkg)])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[BASELINE_NAME] = mod
    spec.loader.exec_module(mod)
    for sub in ("analytics", "codec"):
        importlib.import_module(f"{BASELINE_NAME}.{sub}")
    return mod


def baseline_module(name: str) -> Any:
    """A module of the baseline build (``codec``, ``analytics``), once it is imported."""
    return sys.modules[f"{BASELINE_NAME}.{name}"]
