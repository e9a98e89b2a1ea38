"""Each extra brings what its documented entry points import, and names itself when missing.

``ENTRY_POINTS`` runs what README.md and docs/ document for each extra, in a fresh
interpreter of this (complete) environment, and records every distribution whose
modules it imports. Each must be required, directly or through its own requirements, by
the core or by that extra as pyproject.toml declares it: nothing is installed, so a
missing requirement (``[langgraph]`` without aiobotocore for ``AsyncS3LogSaver``) fails
here rather than in a user's fresh virtualenv.

The second half blocks each such library in turn (``sys.modules[name] = None``, as if
it were not installed) and checks the entry point raises MissingExtraError naming the
extra to install, never a bare ``No module named ...``.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["pytester"]

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

_SIGN = """
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from s3log.signing import Ed25519Signer, PublicKeyVerifier
key = Ed25519PrivateKey.generate()
Ed25519Signer(key); PublicKeyVerifier([key.public_key()])
"""
_LANGGRAPH = """
import asyncio
from s3log.integrations.langgraph import AsyncS3LogSaver, S3LogSaver
async def main():
    async with AsyncS3LogSaver.from_conn_string("s3://agents/lg?endpoint=http://127.0.0.1:9") as saver:
        pass
asyncio.run(main())
with S3LogSaver.from_conn_string("s3://agents/lg?endpoint=http://127.0.0.1:9") as saver:
    pass
"""
_OPENAI_AGENTS = """
from s3log.integrations.openai_agents import S3LogSession
S3LogSession.from_url("c1", url="s3://agents/oa?endpoint=http://127.0.0.1:9")
"""
_ANALYTICS = """
import duckdb, s3log, s3log.analytics as a
con = duckdb.connect()
a.duckdb(con, s3log.MemoryStore())
con.execute("select count(*) from entries").fetchall()
"""

#: extra -> the documented entry points' code (no network: endpoints that are never reached).
ENTRY_POINTS: dict[str, str] = {
    "async": "import s3log; s3log.AsyncS3Store('b'); s3log.open_async_log('s3://b/p')",
    "cli": "import sys; sys.argv = ['s3log', '--help']\nfrom s3log._console import main\n"
           "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code",
    "local": "from s3log.testing.localserver import LocalS3\nLocalS3().start().stop()",
    "fast": "import s3log; s3log.S3Store.fast('b'); s3log.AsyncS3Store.fast('b')",
    "analytics": _ANALYTICS,
    "dask": "import s3log.analytics.dask as d; d.read_entries('b', sessions=['x'])",
    "sign": _SIGN,
    "langgraph": _LANGGRAPH,
    "openai-agents": _OPENAI_AGENTS,
    # Spans when opentelemetry-api is importable; without it the plain path, by design.
    "otel": "import s3log; w = s3log.Log(s3log.MemoryStore()).create(); w.append('k', 1); w.commit()",
}


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, env=env)


def _closure(requirements: list[str], extras_of_s3log: dict[str, list[str]]) -> set[str]:
    """Every distribution ``requirements`` bring, by the installed metadata (markers evaluated)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name == "s3log":
            for extra in req.extras:
                todo.extend(Requirement(r) for r in extras_of_s3log[extra])
            continue
        if (name, frozenset(req.extras)) in seen:
            continue
        seen.add((name, frozenset(req.extras)))
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        wanted = [{"extra": e} for e in req.extras] or [{"extra": ""}]
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate(w) for w in wanted):
                todo.append(sub)
    return {name for name, _ in seen}


@functools.cache
def _owners() -> dict[str, str]:
    """Each installed file, resolved, and the distribution it belongs to (namespace
    packages such as ``langgraph`` are shared by several: the file tells which)."""
    owners: dict[str, str] = {}
    for dist in md.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        for f in dist.files or []:
            if f.suffix in (".py", ".so", ".pyd"):
                owners[str(Path(str(dist.locate_file(f))).resolve())] = name
    return owners


def _imported_distributions(code: str) -> dict[str, list[str]]:
    """The distributions (besides s3log) whose modules ``code`` imports, each with the
    names of those modules. Modules the interpreter had before (site's ``.pth`` hooks:
    setuptools' ``_distutils_hack``) are not the code's."""
    out = _run(f"""
        import json, sys
        before = set(sys.modules)
        exec({code!r})
        print(json.dumps({{n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())
                          if n not in before}}))
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    owners = _owners()
    dists: dict[str, list[str]] = {}
    for name, file in json.loads(out.stdout.splitlines()[-1]).items():
        dist = owners.get(str(Path(file).resolve())) if file else None
        if dist is not None and dist != "s3log":
            dists.setdefault(dist, []).append(name)
    return dists


def _runs_without(code: str, modules: list[str]) -> bool:
    """Whether ``code`` still runs with ``modules`` missing (an optional import of a library's)."""
    return _run(f"import sys\nsys.modules.update(dict.fromkeys({modules!r}))\n{code}").returncode == 0


@pytest.mark.parametrize("extra", sorted(ENTRY_POINTS))
def test_each_extra_brings_what_its_entry_points_import(extra: str) -> None:
    extras = PROJECT["optional-dependencies"]
    provided = _closure([*PROJECT["dependencies"], *extras[extra]], extras)
    imported = _imported_distributions(ENTRY_POINTS[extra])
    # What the extra does not bring was imported because this environment has it: a
    # library's optional import (aiohttp of zstandard) is fine, so each is made missing
    # in turn and the entry point must still run.
    lacking = [d for d, mods in sorted(imported.items()) if d not in provided
               and not _runs_without(ENTRY_POINTS[extra], mods)]
    assert lacking == [], f"s3log[{extra}] does not bring {lacking}, which its entry points need"


def test_every_extra_has_documented_entry_points() -> None:
    from s3log._extras import EXTRAS

    assert set(ENTRY_POINTS) == set(EXTRAS)


# ----------------------------------------------------- a missing library is named


#: (entry point's code, the library made missing, the extra it must name).
MISSING = [
    ("import s3log; s3log.AsyncS3Store('b')", "aiobotocore", "async"),
    ("import s3log; s3log.AsyncS3Store('b')", "aiohttp", "async"),
    ("import s3log; s3log.open_async_log('s3://b/p')", "aiobotocore", "async"),
    ("import s3log; s3log.S3Store.fast('b')", "obstore", "fast"),
    ("import s3log.store._obstore_common as c; c.map_error(Exception(), 'k')", "obstore", "fast"),
    ("import s3log.analytics", "pyarrow", "analytics"),
    ("import s3log.analytics.dask", "pandas", "dask"),
    ("import s3log.analytics.dask as d; d.read_entries('b', sessions=['x'])", "dask", "dask"),
    ("from s3log.testing.localserver import LocalS3; LocalS3().start()", "moto", "local"),
    ("from s3log.testing.localserver import make_moto_atomic; make_moto_atomic()", "moto", "local"),
    ("from s3log.testing.localserver import LocalS3; LocalS3().start()", "flask_cors", "local"),
    ("import s3log.signing as s; s.Ed25519Signer.from_pem(b'')", "cryptography", "sign"),
    ("import s3log.integrations.langgraph", "langgraph", "langgraph"),
    ("from s3log.integrations.langgraph import AsyncS3LogSaver", "langchain_core", "langgraph"),
    ("import s3log.integrations.openai_agents", "agents", "openai-agents"),
]


def test_a_missing_library_names_its_extra() -> None:
    out = _run(f"""
        import json, sys
        results = []
        for code, blocked, extra in {MISSING!r}:
            for name in list(sys.modules):
                if name.startswith("s3log") or name == blocked or name.startswith(blocked + "."):
                    del sys.modules[name]
            sys.modules[blocked] = None
            try:
                exec(code)
                results.append([code, "no error"])
            except ImportError as exc:
                from s3log.errors import S3LogError
                results.append([code, type(exc).__name__, isinstance(exc, S3LogError), str(exc)])
            finally:
                del sys.modules[blocked]
        print(json.dumps(results))
    """)
    assert out.returncode == 0, out.stderr
    for (code, blocked, extra), got in zip(MISSING, json.loads(out.stdout), strict=True):
        assert got[:3] == [code, "MissingExtraError", True], got
        assert f"pip install 's3log[{extra}]'" in got[3] and blocked in got[3], got


def _cli(tmp_path: Path, blocked: str, *args: str) -> subprocess.CompletedProcess[str]:
    # sitecustomize runs before the command: the library is missing for all of it.
    (tmp_path / "sitecustomize.py").write_text(f"import sys\nsys.modules[{blocked!r}] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "S3LOG_BUCKET": "b",
           "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}  # never reached
    return subprocess.run([sys.executable, "-m", "s3log", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize(("args", "blocked", "extra"), [
    (["local-s3"], "moto", "local"),
    (["query", "select 1"], "duckdb", "analytics"),
    (["query", "select 1"], "pyarrow", "analytics"),
    (["export", "--out", "out"], "pyarrow", "analytics"),
], ids=["local-s3", "query-duckdb", "query-pyarrow", "export"])
def test_a_command_names_the_extra_it_misses(args: list[str], blocked: str, extra: str, tmp_path: Path) -> None:
    out = _cli(tmp_path, blocked, *args)
    assert out.returncode != 0
    assert f"pip install 's3log[{extra}]'" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_the_pytest_fixtures_name_the_local_extra(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("import sys\nsys.modules['moto'] = None\n")
    pytester.makepyfile("def test_uses_the_server(s3log_server):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert "MissingExtraError" in result.stdout.str()
    assert "pip install 's3log[local]'" in result.stdout.str()


# ----------------------------------------------------------- the free pytest plugin


def test_loading_the_pytest_plugin_imports_nothing_heavy() -> None:
    # pytest imports the plugin (pytest11) in every run where s3log is installed.
    out = _run("""
        import json, sys
        import pytest
        before = set(sys.modules)
        import s3log.testing.plugin
        new = sorted(set(sys.modules) - before)
        print(json.dumps([m for m in new if m.split(".")[0] in
              ("moto", "boto3", "botocore", "cbor2", "flask", "werkzeug", "aiobotocore")
              or m in ("s3log._format.codec", "s3log.testing.localserver", "s3log.log")]))
    """)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
