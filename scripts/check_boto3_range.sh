#!/usr/bin/env bash
# s3log's core against both ends of its dependency ranges (`make compat`).
#
# Two throwaway virtualenvs: one with the oldest releases pyproject.toml allows for
# the core (boto3 and botocore at boto3's lower bound, cbor2 at its),
# one with the newest available. Each installs s3log (core only, from a built wheel)
# plus pytest and moto, and runs the core behavioural suite over MemoryStore, moto's
# in-process mock and the local HTTP server. The async-HTTP and obstore backends
# need extras, so they are left out here; `make test` covers them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/s3log-compat.XXXXXX")
trap 'rm -rf "$work"' EXIT

# "boto3==L botocore==L cbor2==L" from the core's ">=" bounds.
oldest=$("$PY" - <<'PY'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
pins = []
for dep in deps:
    name, low = re.match(r"([A-Za-z0-9_.-]+).*>=\s*([0-9][^,;\s]*)", dep).groups()
    pins.append(f"{name}=={low}")
    if name == "boto3":  # boto3 X requires botocore >= X: the oldest pair is X, X.
        pins.append(f"botocore=={low}")
print(" ".join(pins))
PY
)
tools=("moto[server]>=5.1.5" "pytest>=8" "pytest-asyncio>=1.0" "hypothesis>=6.100")
tests=(tests/test_protocol.py tests/test_behaviour.py -k "not async-server and not obstore")

run() {
    local name=$1; shift
    local venv="$work/$name"
    echo "== compat: $name: $*"
    "$PY" -m venv "$venv"
    local start=$SECONDS
    "$venv/bin/pip" install -q --disable-pip-version-check . "$@" "${tools[@]}" 2> >(grep -v "^WARNING: Location" >&2)
    echo "   installed in $((SECONDS - start)) s:" \
        "$("$venv/bin/python" -c 'import importlib.metadata as m; print(*(f"{p} {m.version(p)}" for p in ("boto3", "botocore", "cbor2", "moto")), sep=", ")')"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}"
}

# shellcheck disable=SC2086  # $oldest is a list of requirements
run oldest $oldest
run newest --upgrade boto3 botocore cbor2
echo "compat: s3log's core passes with the oldest and the newest boto3 in range"
