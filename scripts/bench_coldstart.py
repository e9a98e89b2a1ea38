"""Cold start of a serverless worker: process start to the first durable commit.

A serverless invocation that lands on a fresh container pays, before its first
acknowledged write, for the interpreter, the imports, the S3 client, the restore of
the session and the commit. This measures that whole path in fresh processes, against
the same path written with bare boto3 (the floor every Python S3 worker pays):

- ``s3log``: ``import s3log``; ``s3log.open_log(URL)``; ``log.open(SID)`` (head and
  segments read, every hash verified, the entries replayed); one ``append`` +
  ``commit`` (durable when it returns); exit.
- ``s3log, probe off``: the same with ``LogConfig(verify_preconditions=False)``, which
  skips the once-per-process check that the store honours conditional writes (12 PUTs
  and 2 DELETEs in three round trips, sent beside the restore's reads: docs/decisions/0051).
- ``s3log / obstore``: the same over ``&store=obstore`` (the ``fast`` extra), if installed.
- ``boto3, minimal``: ``import boto3``; a client; GET the head object; PUT a new head
  with ``IfMatch`` on its ETag (the least a worker that keeps its state in one object
  and never loses a concurrent update can do); exit.
- ``boto3, s3log's requests``: bare boto3 sending the requests s3log sends, in the same
  round trips (head and segment GETs beside the probe's PUTs and DELETEs, then the
  conditional head PUT), so the gap between it and ``s3log`` is the library's own
  import and CPU cost.

Each timed run restores a session of its own, prepared alike (``entries`` entries
committed ``per_commit`` at a time), so no run finds a longer session than another.
Every child is spawned with the parent's time in argv and reports, against it, when
its first line ran, when the imports were done, when the client/log existed, when the
session was restored and when the commit was durable; the parent measures spawn to
exit. Bytecode is compiled once (an untimed first run of each worker, with the cache
under a temporary ``PYTHONPYCACHEPREFIX``), as it is in an installed package.

``python scripts/bench_coldstart.py [--runs 7] [--profile]`` runs it alone;
``python scripts/bench.py --parts coldstart`` runs it as part of the benchmark.
``--profile`` also prints the slowest imports (``-X importtime``) and a cProfile of
one s3log worker.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

import s3log
from s3log._format.layout import DEFAULT_PREFIX
from s3log.testing.localserver import LocalS3

#: The worker: what a serverless handler does on a cold start. argv: t0 URL SID PROBE(0/1).
WORKER_S3LOG = r"""
import json, sys, time
t0 = float(sys.argv[1]); marks = {"python": time.time() - t0}
import s3log
marks["imported"] = time.time() - t0
config = None if sys.argv[4] == "1" else s3log.LogConfig(verify_preconditions=False)
log = s3log.open_log(sys.argv[2], log_config=config)
marks["client"] = time.time() - t0
w = log.open(sys.argv[3])
marks["restored"] = time.time() - t0
w.append("event", {"role": "user", "content": "cold"})
w.commit()
marks["durable"] = time.time() - t0
marks["requests"] = log.store.requests.snapshot() if hasattr(log.store, "requests") else {}
print(json.dumps(marks))
log.close()
"""

#: The floor: one object read, replaced only if unchanged. argv: t0 BUCKET KEY.
WORKER_BOTO3 = r"""
import json, sys, time
t0 = float(sys.argv[1]); marks = {"python": time.time() - t0}
import boto3
marks["imported"] = time.time() - t0
client = boto3.session.Session().client("s3")
marks["client"] = time.time() - t0
got = client.get_object(Bucket=sys.argv[2], Key=sys.argv[3])
body = got["Body"].read()
marks["restored"] = time.time() - t0
client.put_object(Bucket=sys.argv[2], Key=sys.argv[3], Body=body + b"\x00", IfMatch=got["ETag"])
marks["durable"] = time.time() - t0
print(json.dumps(marks))
"""

#: bare boto3 sending s3log's requests in s3log's round trips: the head's GET beside the
#: probe's first round, the segments' GETs beside its second, its third, then the head PUT
#: (docs/decisions/0034, 0051). argv: t0 BUCKET HEAD_KEY PROBE_DIR SEGMENT_KEY...
WORKER_BOTO3_SAME = r"""
import json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
t0 = float(sys.argv[1]); marks = {"python": time.time() - t0}
import boto3
marks["imported"] = time.time() - t0
client = boto3.session.Session().client("s3")
marks["client"] = time.time() - t0
bucket, head, probe, segments = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
race = probe + "race/" + os.urandom(8).hex()

def put(**kw):
    try:
        return client.put_object(Bucket=bucket, Body=os.urandom(16), **kw)["ETag"]
    except client.exceptions.ClientError:
        return None

def delete(**kw):
    try:
        client.delete_object(Bucket=bucket, **kw)
    except client.exceptions.ClientError:
        pass

def read(key):
    got = client.get_object(Bucket=bucket, Key=key)
    return got["Body"].read(), got["ETag"]

with ThreadPoolExecutor(10) as pool:
    got = pool.submit(read, head)
    first = [pool.submit(put, Key=probe + "head", IfNoneMatch="*"),
             pool.submit(put, Key=probe + "missing", IfMatch='"no-such-etag"'),
             *(pool.submit(put, Key=race, IfNoneMatch="*") for _ in range(4)),
             pool.submit(put, Key=race + ".del", IfNoneMatch="*")]
    body, etag = got.result()
    tags = [f.result() for f in first]
    won = next(t for t in tags[2:6] if t)
    second = [*(pool.submit(read, k) for k in segments),
              *(pool.submit(put, Key=race, IfMatch=won) for _ in range(4)),
              pool.submit(delete, Key=race + ".del", IfMatch=tags[6])]
    [f.result() for f in second]
    third = [pool.submit(put, Key=race, IfMatch=won), pool.submit(delete, Key=race, IfMatch=won)]
    [f.result() for f in third]
marks["restored"] = time.time() - t0
client.put_object(Bucket=bucket, Key=head, Body=body + b"\x00", IfMatch=etag)
marks["durable"] = time.time() - t0
print(json.dumps(marks))
"""

MARKS = ("python", "imported", "client", "restored", "durable")


def _fill(log: s3log.Log, entries: int, per_commit: int) -> str:
    """A session of ``entries`` small chat-like entries, committed ``per_commit`` at a time (turns)."""
    w = log.create(meta={"labels": {"agent": "bench"}})
    for i in range(entries):
        w.append("event", {"i": i, "role": "assistant" if i % 2 else "user", "content": "y" * 100})
        if i % per_commit == per_commit - 1:
            w.commit()
    w.commit()
    return w.session_id


def child_env(server: LocalS3, pycache: str) -> dict[str, str]:
    """The children's environment: the server's variables, this checkout's s3log, bytecode cached."""
    env = {**os.environ, **server.env()}
    # Import the s3log this script imported (a worktree, not whatever is installed).
    root = os.path.dirname(os.path.dirname(os.path.abspath(s3log.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    # A deployed package has its .pyc files; a checkout run with PYTHONDONTWRITEBYTECODE
    # would recompile s3log in every child and bill it to cold start.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def spawn(code: str, args: list[str], env: Mapping[str, str], flags: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; its marks (seconds after spawn) and the wall time to exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    t = time.perf_counter()
    out = subprocess.run([sys.executable, *flags, "-c", code, repr(t0), *args], env=dict(env),
                         capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"cold-start worker failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    marks: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    marks["exit"] = wall
    # CPU seconds of the child (user + system): what a busy machine does not inflate.
    marks["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    marks["stderr"] = out.stderr
    return marks


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Best and median (ms) of the wall time and of each mark, over the timed runs."""
    out: dict[str, Any] = {"runs": len(samples)}
    for key in ("exit", "cpu", *MARKS):
        values = [s[key] * 1000 for s in samples]
        out[f"{key}_best_ms"] = min(values)
        out[f"{key}_median_ms"] = statistics.median(values)
    if samples[0].get("requests"):
        out["requests"] = {k: v for k, v in samples[0]["requests"].items() if v}
    return out


def coldstart(server: LocalS3, runs: int = 7, entries: int = 200, per_commit: int = 10) -> dict[str, Any]:
    """Cold start of s3log workers and of bare boto3, best and median of ``runs`` fresh processes each."""
    os.environ.update(server.env())  # this process's own store (preparing sessions) needs them too
    bucket = server.create_bucket()
    url = f"s3://{bucket}/s3log?endpoint={server.endpoint_url}"
    fast_url = url + "&store=obstore"
    store = s3log.S3Store(bucket, endpoint_url=server.endpoint_url)
    log = s3log.Log(store, prefix=DEFAULT_PREFIX)
    try:
        import obstore  # noqa: F401  (the fast extra)

        have_obstore = True
    except ImportError:
        have_obstore = False

    # Kinds of worker, each a factory of (code, argv) for a fresh session.
    def s3log_worker(worker_url: str, probe: bool) -> Callable[[], tuple[str, list[str]]]:
        return lambda: (WORKER_S3LOG, [worker_url, _fill(log, entries, per_commit), "1" if probe else "0"])

    def boto3_minimal() -> tuple[str, list[str]]:
        sid = _fill(log, entries, per_commit)
        return WORKER_BOTO3, [bucket, f"s3log/sessions/{sid}/head"]

    def boto3_same() -> tuple[str, list[str]]:
        sid = _fill(log, entries, per_commit)
        segments = list(log.head(sid).segments)
        return WORKER_BOTO3_SAME, [bucket, f"s3log/sessions/{sid}/head", "s3log/sessions/_probe/", *segments]

    workers: dict[str, Callable[[], tuple[str, list[str]]]] = {
        "s3log": s3log_worker(url, True),
        "s3log, probe off": s3log_worker(url, False),
        "boto3, minimal": boto3_minimal,
        "boto3, s3log's requests": boto3_same,
    }
    if have_obstore:
        workers["s3log / obstore"] = s3log_worker(fast_url, True)
    # The probe object exists before any timed run, as in any bucket written before.
    log.create().commit()

    results: dict[str, Any] = {"entries": entries, "per_commit": per_commit,
                               "segments": len(log.head(_fill(log, entries, per_commit)).segments)}
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in workers}
    with tempfile.TemporaryDirectory(prefix="s3log-pyc-") as pycache:
        env = child_env(server, pycache)
        for make in workers.values():
            spawn(*make(), env)  # compiles and caches the bytecode: untimed
        # Round-robin, so the machine's noise falls on every kind of worker alike.
        for _ in range(runs):
            for name, make in workers.items():
                code, args = make()
                samples[name].append(spawn(code, args, env))
    log.close()
    for name, runs_of in samples.items():
        results[name] = _summary(runs_of)
    base, ours = results["boto3, minimal"], results["s3log"]
    # s3log over the minimal boto3 worker, to the durable ack and to exit, best and median.
    results["ratio_to_boto3"] = {f"{mark}_{stat}": ours[f"{mark}_{stat}_ms"] / base[f"{mark}_{stat}_ms"]
                                 for mark in ("durable", "exit", "cpu") for stat in ("best", "median")}
    return results


def report(r: Mapping[str, Any]) -> None:
    """Print the cold-start table: wall time to exit and, per step, the median mark."""
    print(f"\ncold start: fresh process, restore a {r['entries']}-entry session ({r['segments']} segments), "
          "one durable append, exit (ms after spawn)")
    print(f"{'worker':<26}{'exit best':>10}{'median':>8}{'cpu best':>10}   medians: {'python':>7}{'imports':>8}"
          f"{'client':>8}{'restored':>9}{'durable':>8}   requests")
    for name, s in r.items():
        if not isinstance(s, dict) or "exit_best_ms" not in s:
            continue
        req = ", ".join(f"{k} {v}" for k, v in s.get("requests", {}).items())
        print(f"{name:<26}{s['exit_best_ms']:>10.0f}{s['exit_median_ms']:>8.0f}{s['cpu_best_ms']:>10.0f}"
              f"{'':>12}"
              + "".join(f"{s[m + '_median_ms']:>{w}.0f}" for m, w in zip(MARKS, (7, 8, 8, 9, 8), strict=True))
              + f"   {req}")
    q = r["ratio_to_boto3"]
    print(f"s3log / bare boto3 (minimal): to the durable commit {q['durable_best']:.2f}x best, "
          f"{q['durable_median']:.2f}x median; to exit {q['exit_best']:.2f}x best, {q['exit_median']:.2f}x median; "
          f"CPU {q['cpu_best']:.2f}x best")


def profile(server: LocalS3, entries: int = 200, per_commit: int = 10, top: int = 25) -> None:
    """Print the slowest imports and a cProfile of one s3log worker (after a compiling run)."""
    os.environ.update(server.env())
    bucket = server.create_bucket()
    url = f"s3://{bucket}/s3log?endpoint={server.endpoint_url}"
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=server.endpoint_url), prefix=DEFAULT_PREFIX)
    with tempfile.TemporaryDirectory(prefix="s3log-pyc-") as pycache:
        env = child_env(server, pycache)
        spawn(WORKER_S3LOG, [url, _fill(log, entries, per_commit), "1"], env)
        timed = spawn(WORKER_S3LOG, [url, _fill(log, entries, per_commit), "1"], env, ("-X", "importtime"))
        rows = []
        for line in timed["stderr"].splitlines():
            if line.startswith("import time:") and "|" in line and "cumulative" not in line:
                self_us, cum_us, name = line.split("|")
                rows.append((int(cum_us), int(self_us.split(":")[1]), name.rstrip()))
        print(f"\n-X importtime, top {top} by cumulative time (us): self, cumulative, module")
        for cum, own, name in sorted(rows, reverse=True)[:top]:
            print(f"  {own:>8}{cum:>9}  {name}")
        prof = WORKER_S3LOG.replace("import s3log\n", "import cProfile, pstats\n_p = cProfile.Profile()\n"
                                    "_p.enable()\nimport s3log\n", 1)
        prof += ("_p.disable()\nst = pstats.Stats(_p, stream=sys.stderr)\n"
                 "st.sort_stats('cumulative').print_stats(25)\nst.sort_stats('tottime').print_stats(15)\n")
        out = spawn(prof, [url, _fill(log, entries, per_commit), "1"], env)
        print("\ncProfile of one s3log worker (import to exit):")
        print(out["stderr"])
    log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--per-commit", type=int, default=10)
    parser.add_argument("--profile", action="store_true", help="also print -X importtime and cProfile of a worker")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    with LocalS3() as server:
        r = coldstart(server, args.runs, args.entries, args.per_commit)
        report(r)
        if args.profile:
            profile(server, args.entries, args.per_commit)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)


if __name__ == "__main__":
    main()
