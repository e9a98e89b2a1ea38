"""The Terraform module's safety properties, checked by parsing the .tf files (no network).

The IAM test derives the S3 actions each role needs from s3log's own code: which store
methods each workflow calls (recorded on a real run), and which S3 API calls each
method of :class:`~s3log.S3Store` makes (read from its source), so the policies and
the code cannot drift apart. The bucket policy is checked the same way: every write the
code makes must pass it, and every blind overwrite of those keys must be denied.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import hcl2
import pytest

import s3log
from s3log._api import core as s3log_core
from s3log._format.layout import Layout
from s3log._protocol import activity
from s3log.agent import AgentSession
from s3log.env import Env, uuid7, wall_clock_ms
from s3log.errors import InvalidSessionIdError, StoreError
from s3log.results import GcReport
from s3log.store import s3 as s3_module

ROOT = Path(__file__).resolve().parent.parent
TF = ROOT / "terraform"
MODULE = TF / "modules" / "s3log-bucket"
LAMBDA = TF / "examples" / "lambda-worker"


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items() if not str(k).startswith("__")}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


@functools.cache  # parsing is slow; the tests only read the result
def _load(path: Path) -> dict[str, Any]:
    with path.open() as f:
        return _clean(hcl2.load(f))  # type: ignore[no-any-return]


def _blocks(kind: str, type_: str, where: Path = MODULE) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in where.glob("*.tf"):
        for block in _load(path).get(kind, []):
            for name, body in block.get(type_, {}).items():
                out[name] = body
    return out


def _statements(doc: dict[str, Any]) -> list[dict[str, Any]]:
    stmts = list(doc.get("statement", []))
    for dyn in doc.get("dynamic", []):
        if "statement" in dyn:
            stmts.extend(dyn["statement"].get("content", []))
    return stmts


def test_every_tf_file_parses() -> None:
    files = sorted(TF.rglob("*.tf"))
    assert len(files) >= 7
    for f in files:
        _load(f)


def test_public_access_is_blocked_and_ownership_enforced() -> None:
    pab = _blocks("resource", "aws_s3_bucket_public_access_block")["this"]
    for key in ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"):
        assert pab[key] is True
    own = _blocks("resource", "aws_s3_bucket_ownership_controls")["this"]
    assert own["rule"][0]["object_ownership"] == "BucketOwnerEnforced"


def test_default_encryption_is_sse_s3_or_kms() -> None:
    enc = _blocks("resource", "aws_s3_bucket_server_side_encryption_configuration")["this"]
    default = enc["rule"][0]["apply_server_side_encryption_by_default"][0]
    assert "AES256" in default["sse_algorithm"] and "aws:kms" in default["sse_algorithm"]
    assert default["kms_master_key_id"] == "${var.kms_key_arn}"


def test_bucket_policy_denies_non_tls_and_unconditional_head_writes() -> None:
    doc = _blocks("data", "aws_iam_policy_document")["bucket"]
    stmts = _statements(doc)
    tls = next(s for s in stmts if s.get("sid") == "DenyInsecureTransport")
    assert tls["effect"] == "Deny" and tls["actions"] == ["s3:*"]
    assert tls["condition"][0] == {"test": "Bool", "variable": "aws:SecureTransport", "values": ["false"]}
    head = next(s for s in stmts if s.get("sid") == "DenyUnconditionalHeadWrites")
    assert head["effect"] == "Deny" and head["actions"] == ["s3:PutObject"]
    assert head["resources"] == [
        "${local.bucket_arn}/${var.prefix}/sessions/*/head",
        "${local.bucket_arn}/${var.prefix}/sessions/*/forks/*",
        "${local.bucket_arn}/${var.prefix}/sessions/_probe/*",
    ]
    conds = {(c["test"], c["variable"], tuple(c["values"])) for c in head["condition"]}
    assert conds == {("Null", "s3:if-match", ("true",)), ("Null", "s3:if-none-match", ("true",))}
    # The probe writes its "missing" key with If-Match only: allowed; blindly: refused.
    assert _denials("s3log/sessions/_probe/missing", {"if-match"}) == []
    assert _denials("s3log/sessions/_probe/missing", set()) == ["DenyUnconditionalHeadWrites"]


def test_lifecycle_aborts_multipart_uploads_and_expires_noncurrent_versions() -> None:
    rules = {r["id"]: r for r in _blocks("resource", "aws_s3_bucket_lifecycle_configuration")["this"]["rule"]}
    assert rules["abort-incomplete-multipart-uploads"]["status"] == "Enabled"
    assert "abort_incomplete_multipart_upload" in rules["abort-incomplete-multipart-uploads"]
    nv = rules["expire-noncurrent-versions"]
    assert "local.versioning" in nv["status"] and "noncurrent_version_expiration" in nv
    # The one object each precondition probe leaves goes after a day (docs/decisions/0034).
    probe = rules["expire-probe-race-keys"]
    assert probe["filter"][0]["prefix"] == "${var.prefix}/sessions/_probe/race/" and probe["status"] == "Enabled"
    assert probe["expiration"][0]["days"] == 1
    # gc and rm leave delete markers in a versioned bucket: they must not pile up either.
    assert nv["expiration"][0]["expired_object_delete_marker"] is True


def test_prefix_variable_is_validated_and_nothing_is_hard_coded() -> None:
    variables: dict[str, Any] = {}
    for block in _load(MODULE / "variables.tf")["variable"]:
        variables.update(block)
    assert "validation" in variables["prefix"] and "validation" in variables["bucket_name"]
    for f in TF.rglob("*.tf"):
        text = f.read_text()
        assert "arn:aws:s3:::" not in text, f"hard-coded bucket ARN in {f}"
        for region in ("us-east-1", "eu-west-1", "us-west-2"):
            assert region not in text, f"hard-coded region in {f}"
        assert not re.search(r"\b\d{12}\b", text), f"hard-coded account id in {f}"


# ------------------------------------------------------------ IAM derived from the code

BOTO_TO_IAM = {
    "get_object": "s3:GetObject",
    "put_object": "s3:PutObject",
    "list_objects_v2": "s3:ListBucket",
    "delete_object": "s3:DeleteObject",
}
#: What S3 authorizes a request with beyond its own action, by (boto3 call, argument):
#: a DELETE with If-Match on an ETag needs s3:GetObject on the object as well ("conditional
#: deletes with a specific ETag value require both s3:DeleteObject and s3:GetObject
#: permissions", S3 user guide, "Enforce conditional deletes"). Without it, a role allowed
#: to delete a key it may not read was refused every If-Match DELETE of it.
IMPLIED = {("delete_object", "IfMatch"): "s3:GetObject"}
ROLES = ["reader", "writer", "gc", "sweep"]
DAY_MS = 86_400_000
#: The explicit child id of the retried fork the writer flows make; rm deletes it (a fork child).
RETRIED_CHILD = "retried-fork"


@functools.cache  # parsed once: ast.parse in several threads at once fails on CPython 3.11
def _s3_actions_per_store_method() -> dict[str, set[str]]:
    tree = ast.parse(inspect.getsource(s3_module.S3Store))
    out: dict[str, set[str]] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_"):
            continue
        calls = set()
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                # self.client.put_object(...) or, with the client fetched first, client.put_object(...)
                and ((isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "client")
                     or (isinstance(node.func.value, ast.Name) and node.func.value.id == "client"))
            ):
                assert node.func.attr in BOTO_TO_IAM, f"S3Store.{fn.name} calls {node.func.attr}: map it to IAM"
                calls.add(BOTO_TO_IAM[node.func.attr])
                calls.update(IMPLIED[(node.func.attr, kw.arg)] for kw in node.keywords
                             if kw.arg is not None and (node.func.attr, kw.arg) in IMPLIED)
        if calls:
            out[fn.name] = calls
    return out


class Recording(s3log.MemoryStore):
    """A MemoryStore that remembers every store call (method, key) made through it.

    It does not claim to honour preconditions, so writers run the precondition probe
    against it as they do against S3 (the probe's PUTs are writer calls too).
    """

    honours_preconditions = False

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []
        #: Keys whose next create-only PUT fails (a non-retried store error).
        self.fail_once: set[str] = set()

    @property
    def used(self) -> set[str]:
        return {m for m, _ in self.calls}

    def get(self, key: str) -> Any:
        self.calls.append(("get", key))
        return super().get(key)

    def put_if_absent(self, key: str, body: bytes) -> str:
        self.calls.append(("put_if_absent", key))
        if key in self.fail_once:
            self.fail_once.discard(key)
            raise StoreError("injected", key=key, code="InternalError", status=400)
        return super().put_if_absent(key, body)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.calls.append(("put_if_match", key))
        return super().put_if_match(key, body, etag)

    def list(self, prefix: str, **kw: Any) -> Any:
        self.calls.append(("list", prefix))
        return super().list(prefix, **kw)

    def delete(self, key: str) -> None:
        self.calls.append(("delete", key))
        super().delete(key)

    def delete_if_match(self, key: str, etag: str) -> None:
        self.calls.append(("delete_if_match", key))
        super().delete_if_match(key, etag)


class Clock:
    """The recorded log's clock: the flows move it on by days (day rollover, idleness)."""

    def __init__(self) -> None:
        self.ms = wall_clock_ms()

    def __call__(self) -> int:
        return self.ms


def _reader_flows(log: s3log.Log, sid: str) -> None:
    log.read(sid)
    log.verify(sid)
    log.head(sid)
    list(log.list_sessions())
    log.children(sid)
    log.lineage(sid)
    log.active_sessions(since=timedelta(hours=1))  # LISTs the activity index


def _writer_flows(log: s3log.Log, store: Recording, clock: Clock) -> str:
    """A writer's workflows; a writer also reads (restore, lineage), so it runs the reader's too."""
    w = log.create()
    w.append("k", 1)
    w.commit()
    w.append("big", "x" * 40000)
    w.commit()
    other = log.open(w.session_id)
    other.append("k", 2)
    other.commit()
    w.append("k", 3)
    w.commit()  # conflict: forks
    log.fork(w.session_id, at_seq=0)
    a = AgentSession.create(log)
    a.user_input("x")
    a.turn_end()
    AgentSession.restore(log, a.session_id)
    # The next UTC day: two writers of one session each write the day's activity marker
    # before their head; the second finds it there and confirms it with one GET.
    clock.ms += DAY_MS
    first, second = log.open(other.session_id), log.open(other.session_id)
    first.append("k", 4)
    first.commit()
    second.append("k", 5)
    second.commit()  # its head PUT then loses the race: forks
    marker = activity.marker_key(Layout(), activity.day_of(clock.ms), other.session_id)
    assert ("put_if_absent", marker) in store.calls and ("get", marker) in store.calls
    # A fork into an explicit child id whose head PUT failed, retried: the retry replaces
    # the first attempt's marker with If-Match (docs/decisions/0008). Denied by the
    # bucket policy's create-only statement once, which no test saw.
    child = RETRIED_CHILD
    store.fail_once.add(log.layout.head(child))
    with pytest.raises(StoreError):
        log.fork(other.session_id, child_id=child)
    clock.ms += 1000  # the retry's marker differs from the first (its refreshed_at)
    log.fork(other.session_id, child_id=child)
    assert ("put_if_match", f"{log.layout.forks_dir(other.session_id)}{child}") in store.calls
    assert ("put_if_match", "s3log/sessions/_probe/missing") in store.calls, "the probe must have run"
    _reader_flows(log, other.session_id)
    return other.session_id


def _gc_flows(log: s3log.Log, store: Recording, sid: str) -> None:
    """What the gc role runs: ``s3log rm`` (its look-ups, then the delete) and ``gc``."""
    # Old garbage of both kinds gc collects, planted behind the recorder's back.
    orphan_seg = f"s3log/sessions/{sid}/seg/000000000999-{'0' * 64}.cbor"
    orphan_marker = f"s3log/sessions/{sid}/forks/{uuid7()}"  # a child that does not exist
    store.put_raw(orphan_seg, b"x", mtime_ms=0)
    store.put_raw(orphan_marker, b"", mtime_ms=0)
    # rm of a fork child (the retried fork): its own marker, in its parent's folder, goes
    # with If-Match on the ETag listed, as gc deletes a dangling one.
    victim = RETRIED_CHILD
    parent = log.head(victim).parent
    assert parent is not None
    log.object_keys(victim)
    log.children(victim)
    log.delete(victim)
    report = log.gc(older_than_ms=0)
    # The delete path must really have run, or "gc needs no PUT" would prove nothing.
    assert {orphan_seg, orphan_marker} <= set(report.deleted)
    assert any(m == "delete" and k.startswith("s3log/activity/") for m, k in store.calls), "rm drops markers"
    # Conditional DELETEs of fork markers: S3 authorizes them only with GetObject on the
    # marker too. The gc policy, which read heads alone, refused both (AccessDenied).
    own_marker = log.layout.fork_marker(parent.session, victim)
    assert {("delete_if_match", own_marker), ("delete_if_match", orphan_marker)} <= set(store.calls)


def _sweep_flows(log: s3log.Log, store: Recording, clock: Clock) -> None:
    """What the retention sweep runs, as scripts/sweep_lambda.py does: expire, then gc."""
    # A dangling fork marker (its child has no head), planted behind the recorder's back.
    sid = log.list_session_ids()[0]
    dangling = f"s3log/sessions/{sid}/forks/{uuid7()}"
    store.put_raw(dangling, b"", mtime_ms=0)
    clock.ms += 40 * DAY_MS  # every session idle; the index's first days past keeping
    expired = log.expire(idle_for=timedelta(days=30))
    assert expired.expired and expired.pruned_days, expired
    # expire deleted the heads (If-Match); gc collects what they listed.
    assert all(("delete_if_match", log.layout.head(s)) in store.calls for s in expired.expired)
    collected = log.gc(older_than_ms=3_600_000)
    assert collected.deleted and all("/seg/" in k or "/forks/" in k for k in collected.deleted), collected.deleted
    # gc's If-Match DELETE of the dangling marker (S3: DeleteObject and GetObject on it).
    assert ("delete_if_match", dangling) in store.calls


PROBE_MISSING = "s3log/sessions/_probe/missing"


def _fresh_process(log: s3log.Log) -> s3log.Log:
    """The log of a process that has not probed ``log``'s store yet: each role runs in
    its own process, and gc, rm and expire probe before they delete (docs/decisions/0034)."""
    s3log_core._PROBED.discard(log.store)
    return s3log.Log(log.store, config=log.config)


@pytest.fixture(scope="module")
def recorded() -> dict[str, list[tuple[str, str]]]:
    """Every store call of each role's workflows, on one log (in this order); the gc
    and sweep roles' each in a fresh process, so each runs the precondition probe too."""
    store = Recording()
    clock = Clock()
    log = s3log.Log(store, config=s3log.LogConfig(env=Env(clock_ms=clock)))
    out: dict[str, list[tuple[str, str]]] = {}

    def take(role: str) -> None:
        out[role] = list(store.calls)
        store.calls.clear()

    sid = _writer_flows(log, store, clock)
    take("writer")
    _reader_flows(log, sid)
    take("reader")
    # A day on, whatever the time of day: rm deletes the victim's activity markers (it
    # leaves those of days a session created again at its id could still commit on).
    clock.ms += DAY_MS
    _gc_flows(_fresh_process(log), store, sid)
    take("gc")
    _sweep_flows(_fresh_process(log), store, clock)
    take("sweep")
    for role in ("gc", "sweep"):
        assert ("put_if_match", PROBE_MISSING) in out[role], f"the {role} flows must have probed"
    return out


def _actions(used: set[str]) -> set[str]:
    per = _s3_actions_per_store_method()
    return set().union(*(per[m] for m in used))


@pytest.fixture(scope="module")
def derived(recorded: dict[str, list[tuple[str, str]]]) -> dict[str, set[str]]:
    return {role: _actions({m for m, _ in calls}) for role, calls in recorded.items()}


def _locals(path: Path = MODULE / "iam.tf") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for block in _load(path)["locals"]:
        out.update(block)
    return out


def _role_doc(role: str) -> dict[str, Any]:
    assert _locals()["role_policies"][role] == f"${{data.aws_iam_policy_document.{role}.json}}"
    return _blocks("data", "aws_iam_policy_document")[role]


def _role_statements(role: str) -> dict[str, dict[str, Any]]:
    return {s["sid"]: s for s in _statements(_role_doc(role))}


def _policy_actions(role: str) -> set[str]:
    return {a for s in _statements(_role_doc(role)) for a in _expand(s["actions"]) if a.startswith("s3:")}


# --------------------------------------------------- evaluating policies on recorded calls

BUCKET_ARN = "arn:aws:s3:::b"
KMS_ARN = "arn:aws:kms:r:0:key/k"
SUBSTITUTE = {
    "${local.bucket_arn}": BUCKET_ARN,
    "${var.prefix}": "s3log",
    "${var.kms_key_arn}": KMS_ARN,
    "${module.s3log.bucket_arn}": BUCKET_ARN,
    "${module.s3log.prefix}": "s3log",
}
HEADER_KEYS = {"s3:if-match": "if-match", "s3:if-none-match": "if-none-match"}
WRITE_HEADERS = {"put_if_absent": {"if-none-match"}, "put_if_match": {"if-match"}}
#: The conditional headers each store method sends, deletes included.
CALL_HEADERS = {**WRITE_HEADERS, "delete_if_match": {"if-match"}}


def _resolve(text: str) -> str:
    iam_locals = _locals()
    for _ in range(3):  # locals refer to other locals (sessions_arn -> bucket_arn)
        text = re.sub(
            r"\$\{local\.(\w+)\}",
            lambda m: iam_locals[m[1]] if isinstance(iam_locals.get(m[1]), str) else m[0],
            text,
        )
        for ref, value in SUBSTITUTE.items():
            text = text.replace(ref, value)
    assert "${" not in text, f"unresolved reference in {text!r}"
    return text


def _expand(values: str | list[str]) -> list[str]:
    """A list-valued policy field with the module's locals and the test bucket substituted."""
    if isinstance(values, str):
        m = re.fullmatch(r"\$\{local\.(\w+)\}", values)
        assert m and isinstance(_locals()[m[1]], list), f"not a list: {values!r}"
        values = _locals()[m[1]]
    return [_resolve(v) for v in values]


def _iam_match(pattern: str, value: str) -> bool:
    """IAM wildcard matching: '*' matches any run of characters, '/' included."""
    return re.fullmatch(".*".join(re.escape(p) for p in _resolve(pattern).split("*")), value) is not None


@dataclass(frozen=True)
class S3Call:
    """One S3 request as IAM sees it: action, resource ARN, s3:prefix (LIST), conditional headers."""

    action: str
    resource: str
    prefix: str | None = None
    headers: frozenset[str] = frozenset()


def _s3_calls(calls: list[tuple[str, str]]) -> set[S3Call]:
    per = _s3_actions_per_store_method()
    out = set()
    for method, key in calls:
        for action in per[method]:
            if action == "s3:ListBucket":
                out.add(S3Call(action, BUCKET_ARN, prefix=key))
            else:
                out.add(S3Call(action, f"{BUCKET_ARN}/{key}", headers=frozenset(CALL_HEADERS.get(method, ()))))
    return out


def _condition_holds(cond: dict[str, Any], call: S3Call) -> bool:
    if cond["test"] == "Null":
        absent = HEADER_KEYS[cond["variable"]] not in call.headers
        return absent == (list(cond["values"]) == ["true"])
    if cond["test"] == "Bool" and cond["variable"] == "aws:SecureTransport":
        return list(cond["values"]) == ["true"]  # every request here goes over TLS
    if cond["test"] == "StringLike" and cond["variable"] == "s3:prefix":
        return call.prefix is not None and any(_iam_match(v, call.prefix) for v in cond["values"])
    raise AssertionError(f"the test does not evaluate condition {cond}")


def _applies(stmt: dict[str, Any], call: S3Call) -> bool:
    actions = _expand(stmt["actions"])
    if call.action not in actions and "s3:*" not in actions:
        return False
    if not any(_iam_match(r, call.resource) for r in stmt["resources"]):
        return False
    return all(_condition_holds(c, call) for c in stmt.get("condition", []))


def _allowed(role: str, call: S3Call) -> bool:
    return any(_applies(s, call) for s in _statements(_role_doc(role)))


# -------------------------------------------------------------------- the role policies


@pytest.mark.parametrize("role", ROLES)
def test_policy_grants_exactly_the_s3_calls_the_code_makes(role: str, derived: dict[str, set[str]]) -> None:
    assert _policy_actions(role) == derived[role]


@pytest.mark.parametrize("role", ROLES)
def test_policy_allows_every_request_the_code_makes(role: str, recorded: dict[str, list[tuple[str, str]]]) -> None:
    for call in _s3_calls(recorded[role]):
        assert _allowed(role, call), f"the {role} policy refuses {call}"


@pytest.mark.parametrize("role", ROLES)
def test_policy_grants_no_key_pattern_the_code_does_not_use(
    role: str, recorded: dict[str, list[tuple[str, str]]]
) -> None:
    """Every (action, resource) and every s3:prefix value a statement names is used by some request."""
    calls = _s3_calls(recorded[role])
    for sid, stmt in _role_statements(role).items():
        if sid == "UseKey":
            continue
        for action in _expand(stmt["actions"]):
            for resource in stmt["resources"]:
                narrowed = {**stmt, "actions": [action], "resources": [resource]}
                if action == "s3:ListBucket":
                    (cond,) = stmt["condition"]
                    for value in cond["values"]:
                        one = {**narrowed, "condition": [{**cond, "values": [value]}]}
                        assert any(_applies(one, c) for c in calls), f"{role}/{sid}: nothing lists {value}"
                else:
                    assert any(_applies(narrowed, c) for c in calls), f"{role}/{sid}: {action} on {resource} unused"


@pytest.mark.parametrize("role", ROLES)
def test_a_missing_key_answers_not_found_not_access_denied(
    role: str, recorded: dict[str, list[tuple[str, str]]]
) -> None:
    """S3 answers a request for a missing key 404 only to a caller whose s3:ListBucket
    admits the key as ``s3:prefix`` (it evaluates that grant with the key as the prefix);
    anyone else gets 403, which s3log takes for a fatal error, not for "absent" (a head
    not created yet, a marker deleted meanwhile, the probe's missing object). Every key
    a role reads, or replaces or deletes with If-Match, must be one its ListPrefix admits."""
    keyed = [(m, k) for m, k in recorded[role] if m in ("get", "put_if_match", "delete_if_match")]
    assert keyed
    for method, key in keyed:
        assert _allowed(role, S3Call("s3:ListBucket", BUCKET_ARN, prefix=key)), f"{role}: {method} {key} 403 if missing"


@pytest.mark.parametrize("role", ROLES)
def test_kms_grant_matches_what_the_role_does(role: str, derived: dict[str, set[str]]) -> None:
    use_key = _role_statements(role)["UseKey"]
    dyn = next(d["statement"] for d in _role_doc(role)["dynamic"] if d["statement"]["content"][0] is use_key)
    assert dyn["for_each"] == "${var.kms_key_arn == null ? [] : [1]}"
    assert _expand(use_key["resources"]) == [KMS_ARN]
    # GetObject of an SSE-KMS object needs Decrypt; PutObject needs GenerateDataKey too.
    expected = ["kms:Decrypt", "kms:GenerateDataKey"] if "s3:PutObject" in derived[role] else ["kms:Decrypt"]
    assert _expand(use_key["actions"]) == expected


PROBE_STATEMENTS = {"ReadProbe", "ProbeCreateOnly", "ProbeIfMatch"}


def test_gc_role_writes_only_the_probes_keys(recorded: dict[str, list[tuple[str, str]]]) -> None:
    # gc and rm only list, read heads and delete: a gc credential must not rewrite
    # history. Its only PUTs are the precondition probe's, of the probe's own keys.
    assert {k for m, k in recorded["gc"] if m in WRITE_HEADERS} <= {k for k in _probe_keys(recorded["gc"])}
    stmts = _role_statements("gc")
    assert set(stmts) == {"ReadHeads", "ReadForkMarkers", "DeleteSessionsAndMarkers", "ListPrefix", "UseKey"} | \
        PROBE_STATEMENTS
    assert stmts["ReadHeads"]["actions"] == ["s3:GetObject"]
    assert stmts["ReadHeads"]["resources"] == ["${local.heads_arn}"]
    assert not _allowed("gc", S3Call("s3:GetObject", f"{BUCKET_ARN}/s3log/sessions/x/seg/1.cbor"))
    assert not _allowed("gc", S3Call("s3:GetObject", f"{BUCKET_ARN}/s3log/activity/2025-01-01/x"))


@pytest.mark.parametrize("role", ["gc", "sweep"])
def test_roles_that_delete_fork_markers_with_if_match_may_get_them(role: str) -> None:
    # S3 authorizes a DELETE with If-Match on an ETag only with GetObject on the object
    # too (IMPLIED): gc, rm and the sweep's gc delete fork markers so; never a segment.
    stmt = _role_statements(role)["ReadForkMarkers"]
    assert stmt["actions"] == ["s3:GetObject"] and stmt["resources"] == ["${local.forks_arn}"]
    assert "condition" not in stmt
    assert _locals()["forks_arn"] == "${local.bucket_arn}/${var.prefix}/sessions/*/forks/*"
    assert _s3_actions_per_store_method()["delete_if_match"] == {"s3:DeleteObject", "s3:GetObject"}
    marker = f"{BUCKET_ARN}/s3log/sessions/x/forks/y"
    for call in _s3_calls([("delete_if_match", "s3log/sessions/x/forks/y")]):
        assert _allowed(role, call), call
    assert _allowed(role, S3Call("s3:GetObject", marker))
    assert not _allowed(role, S3Call("s3:GetObject", f"{BUCKET_ARN}/s3log/sessions/x/seg/1.cbor"))


def test_gc_and_sweep_delete_sessions_and_activity_markers_only() -> None:
    stmt = _role_statements("gc")["DeleteSessionsAndMarkers"]
    assert stmt["actions"] == ["s3:DeleteObject"]
    assert stmt["resources"] == ["${local.sessions_arn}", "${local.activity_arn}"]
    for role in ("gc", "sweep"):
        assert _allowed(role, S3Call("s3:DeleteObject", f"{BUCKET_ARN}/s3log/activity/2025-01-01/x"))
        assert _allowed(role, S3Call("s3:DeleteObject", f"{BUCKET_ARN}/s3log/sessions/x/seg/1.cbor"))
        assert _allowed(role, S3Call("s3:DeleteObject", f"{BUCKET_ARN}/s3log/sessions/x/forks/y"))
        assert not _allowed(role, S3Call("s3:DeleteObject", f"{BUCKET_ARN}/s3log/other"))
        assert not _allowed(role, S3Call("s3:DeleteObject", f"{BUCKET_ARN}/elsewhere/sessions/x/head"))
    # The sweep deletes a head (an idle one, or a tombstone past gc's grace) only with If-Match, so a
    # session that took the id over is never deleted; gc also runs `s3log rm`, which
    # deletes by key on a store without conditional DELETE (obstore).
    head = f"{BUCKET_ARN}/s3log/sessions/x/head"
    assert _allowed("sweep", S3Call("s3:DeleteObject", head, headers=frozenset({"if-match"})))
    assert not _allowed("sweep", S3Call("s3:DeleteObject", head))
    assert _allowed("gc", S3Call("s3:DeleteObject", head))
    assert _locals()["activity_arn"] == "${local.bucket_arn}/${var.prefix}/activity/*"
    assert _locals()["sessions_arn"] == "${local.bucket_arn}/${var.prefix}/sessions/*"
    assert _locals()["heads_arn"] == "${local.bucket_arn}/${var.prefix}/sessions/*/head"


def _probe_keys(calls: list[tuple[str, str]]) -> list[str]:
    return [k for _, k in calls if k.startswith("s3log/sessions/_probe/")]


def test_sweep_writes_only_the_probes_keys_and_deletes_heads_only_with_if_match(
    recorded: dict[str, list[tuple[str, str]]]
) -> None:
    stmts = _role_statements("sweep")
    assert set(stmts) == {"ReadHeads", "ReadForkMarkers", "DeleteGarbageAndMarkers", "DeleteHeadsIfMatch",
                          "ListPrefix", "UseKey"} | PROBE_STATEMENTS
    assert stmts["DeleteHeadsIfMatch"]["resources"] == ["${local.heads_arn}"]
    assert stmts["DeleteHeadsIfMatch"]["condition"] == [
        {"test": "Null", "variable": "s3:if-match", "values": ["false"]}]
    head_deletes = [m for m, k in recorded["sweep"] if k.endswith("/head") and m.startswith("delete")]
    assert head_deletes and set(head_deletes) == {"delete_if_match"}
    # expire and gc write nothing; the probe before them writes its own keys only.
    writes = [(m, k) for m, k in recorded["sweep"] if m in WRITE_HEADERS]
    assert writes and all(k.startswith("s3log/sessions/_probe/") for _, k in writes)
    # The probe's statements are the same in both roles: what the probe needs, no more.
    gc = _role_statements("gc")
    assert all(stmts[sid] == gc[sid] for sid in PROBE_STATEMENTS)


#: Every PUT someone holding a role's credentials could try, on every kind of key.
_KEYS = {"head": "s3log/sessions/x/head", "segment": "s3log/sessions/x/seg/1.cbor",
         "fork marker": "s3log/sessions/x/forks/y", "activity marker": "s3log/activity/2025-01-01/x",
         "probe": "s3log/sessions/_probe/head"}
_CONDITIONS = [frozenset(), frozenset({"if-match"}), frozenset({"if-none-match"})]


@pytest.mark.parametrize("role", ["reader", "gc", "sweep"])
def test_only_the_writer_may_put_a_session_object(role: str) -> None:
    # IAM cannot constrain a PUT's body: a role allowed any PUT of a head could store a
    # forged one (an inline tail from seq 0 verifies without signing keys). The reader,
    # gc and the sweep may not PUT any session object or marker, with or without
    # conditions; gc and the sweep PUT the probe's keys, only conditionally (IAM alone,
    # whatever the bucket policy), the reader not even those.
    for what, key in _KEYS.items():
        for headers in _CONDITIONS:
            allowed = _allowed(role, S3Call("s3:PutObject", f"{BUCKET_ARN}/{key}", headers=headers))
            assert allowed is (what == "probe" and role != "reader" and bool(headers)), (what, headers)
    for headers in _CONDITIONS[1:]:
        assert _allowed("writer", S3Call("s3:PutObject", f"{BUCKET_ARN}/{_KEYS['head']}", headers=headers))
    # No session id names the probe's folder, so its grants reach no session's object.
    with pytest.raises(InvalidSessionIdError):
        s3log.Log(s3log.MemoryStore()).create("_probe")


@pytest.mark.parametrize("role", ROLES)
def test_the_probes_delete_grant_reaches_no_session_object(role: str) -> None:
    # The probe deletes its own keys with If-Match: writers, gc and the sweep may; a
    # blind DELETE of them, and anything more than each role had, stays refused.
    probe = f"{BUCKET_ARN}/s3log/sessions/_probe/race/x"
    if_match = frozenset({"if-match"})
    assert _allowed(role, S3Call("s3:DeleteObject", probe, headers=if_match)) is (role != "reader")
    assert _allowed(role, S3Call("s3:DeleteObject", probe)) is (role == "gc")  # gc deletes by key anyway
    for what, key in _KEYS.items():
        if what == "probe":
            continue
        for headers in _CONDITIONS:
            allowed = _allowed(role, S3Call("s3:DeleteObject", f"{BUCKET_ARN}/{key}", headers=headers))
            expected = role == "gc" or (role == "sweep" and (what != "head" or "if-match" in headers))
            assert allowed is expected, (role, what, headers)


def test_what_the_sweep_can_and_cannot_delete() -> None:
    # It deletes idle sessions (its job) and garbage; a head only if it is still the one
    # read, so a session committed to meanwhile is kept; nothing outside the prefix.
    head = f"{BUCKET_ARN}/s3log/sessions/x/head"
    assert _allowed("sweep", S3Call("s3:DeleteObject", head, headers=frozenset({"if-match"})))
    assert not _allowed("sweep", S3Call("s3:DeleteObject", head))
    assert _allowed("sweep", S3Call("s3:GetObject", head))
    assert not _allowed("sweep", S3Call("s3:GetObject", f"{BUCKET_ARN}/s3log/sessions/x/seg/1.cbor"))
    assert not _allowed("sweep", S3Call("s3:DeleteObject", f"{BUCKET_ARN}/elsewhere/sessions/x/head",
                                        headers=frozenset({"if-match"})))


class UnderPolicy(Recording):
    """A Recording store that answers 403 to every request a role's IAM policy (or, for
    a PUT, the bucket policy) refuses, as S3 would under that role's credentials."""

    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role
        self.refused: list[S3Call] = []
        _s3_actions_per_store_method()  # before the driver's threads ask for it

    def _check(self, method: str, key: str) -> None:
        for call in _s3_calls([(method, key)]):
            denied = not _allowed(self.role, call) or (
                call.action == "s3:PutObject" and _denials(key, set(call.headers)))
            if denied:
                self.refused.append(call)
                raise StoreError("Access Denied", key=key, code="AccessDenied", status=403)

    def get(self, key: str) -> Any:
        self._check("get", key)
        return super().get(key)

    def put_if_absent(self, key: str, body: bytes) -> str:
        self._check("put_if_absent", key)
        return super().put_if_absent(key, body)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self._check("put_if_match", key)
        return super().put_if_match(key, body, etag)

    def list(self, prefix: str, **kw: Any) -> Any:
        self._check("list", prefix)
        return super().list(prefix, **kw)

    def delete(self, key: str) -> None:
        self._check("delete", key)
        super().delete(key)

    def delete_if_match(self, key: str, etag: str) -> None:
        self._check("delete_if_match", key)
        super().delete_if_match(key, etag)


@pytest.mark.parametrize("role", ["writer", "gc", "sweep"])
def test_a_fresh_probe_under_each_role_that_writes_or_deletes_tests_every_property(role: str) -> None:
    # Under the gc and sweep policies the probe's PUTs were refused: every property
    # "untested", and gc, rm and expire went on with a warning on a store nobody had
    # checked. Each role's probe (a new process: never probed before) must be complete.
    store = UnderPolicy(role)
    report = s3log.Log(store).check_store()
    assert report.complete and report.ok and report.delete_if_match is True, (report, store.refused)
    assert store.refused == []
    assert {m for m, _ in store.calls} == {"put_if_absent", "put_if_match", "delete_if_match"}


@pytest.mark.parametrize("role", ["gc", "sweep"])
def test_gc_and_expire_under_their_policy_probe_completely_then_delete(
    role: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = UnderPolicy(role)
    clock = Clock()
    writer_log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(env=Env(clock_ms=clock)))
    w = writer_log.create("idle")
    w.append("k", 1)
    w.commit()
    for key in writer_log.store.all_keys():  # the writer's objects, copied behind the policy's back
        store.put_raw(key, writer_log.store.get(key).body, mtime_ms=0)
    log = s3log.Log(store, config=s3log.LogConfig(env=Env(clock_ms=clock)))
    clock.ms += 40 * DAY_MS
    with caplog.at_level("WARNING", logger="s3log"):
        if role == "sweep":
            assert log.expire(idle_for=timedelta(days=30)).expired == ["idle"]
        else:
            log.delete("idle")
        log.gc(older_than_ms=0)
    assert not [r for r in caplog.records if "could not verify" in r.getMessage()]
    assert store.refused == [] and ("put_if_match", PROBE_MISSING) in store.calls
    assert not [k for k in store.all_keys() if not k.startswith("s3log/sessions/_probe/")]


def _saver_flows() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A LangGraph saver's verbs on a recorded log: (what appends, copies and prunes to
    kept checkpoints, what deletes: delete_thread, prune(strategy="delete"), and a
    delete_for_runs that leaves a thread empty, whose Log.compact deletes its session)."""
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

    from s3log.integrations.langgraph import S3LogSaver

    store = Recording()
    clock = Clock()
    saver = S3LogSaver(s3log.Log(store, config=s3log.LogConfig(env=Env(clock_ms=clock), tail_per_commit=0,
                                                               tail_max_bytes=2048)))

    def put(thread: str, n: int, run: str) -> Any:
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        for i in range(n):
            checkpoint = generate_checkpoint()
            checkpoint["channel_values"] = {"x": "y" * 1500}
            config = saver.put(config, checkpoint, generate_metadata(step=i, run_id=run), {})
        return config

    last = put("a", 4, "run-a")
    saver.put_writes(last, [("channel", 1)], "task")
    put("b", 2, "run-b")
    put("c", 2, "run-c")
    saver.copy_thread("a", "a-copy")
    saver.prune(["a"], keep=1)
    saver.get_tuple({"configurable": {"thread_id": "a-copy", "checkpoint_ns": ""}})
    writes = list(store.calls)
    store.calls.clear()
    clock.ms += DAY_MS  # past rm's grace for the copy's fork marker and the activity markers
    saver.delete_thread("a-copy")
    saver.prune(["b"], keep=1, strategy="delete")
    saver.delete_for_runs(["run-c"])  # every checkpoint of thread c: its session goes
    return writes, list(store.calls)


def test_langgraph_saver_appends_with_the_writer_policy_and_deletes_with_gc_beside_it() -> None:
    writes, deletes = _saver_flows()
    for call in _s3_calls(writes):
        assert _allowed("writer", call), f"the writer policy refuses the saver's {call}"
    for method, key in writes:
        if method in WRITE_HEADERS:
            assert _denials(key, WRITE_HEADERS[method]) == [], f"{method} {key} would be denied"
    # Deleting a thread is Log.delete: DeleteObject, which the writer policy never grants
    # (terraform/README.md: give a saver that deletes threads the gc policy too).
    assert {m for m, _ in deletes} >= {"delete", "delete_if_match"}
    refused = {c for c in _s3_calls(deletes) if not _allowed("writer", c)}
    assert refused and {c.action for c in refused} == {"s3:DeleteObject"}
    for call in _s3_calls(deletes):
        assert _allowed("writer", call) or _allowed("gc", call), f"writer + gc refuse the saver's {call}"
    readme = (TF / "README.md").read_text()
    assert "delete_thread" in readme and "attach `gc_policy_arn` beside `writer_policy_arn`" in readme


def test_writer_writes_activity_markers_and_deletes_only_the_probes_keys(
    recorded: dict[str, list[tuple[str, str]]]
) -> None:
    deletes = [(m, k) for m, k in recorded["writer"] if m.startswith("delete")]
    assert deletes and {m for m, _ in deletes} == {"delete_if_match"}
    assert all(k.startswith("s3log/sessions/_probe/race/") for _, k in deletes)
    stmts = _role_statements("writer")
    assert set(stmts) == {"ReadWriteSessions", "ProbeDeletesIfMatch", "WriteActivityMarkers", "ListPrefix",
                          "UseKey"}
    assert stmts["ProbeDeletesIfMatch"]["resources"] == ["${local.probe_arn}"]
    assert stmts["ProbeDeletesIfMatch"]["condition"] == [
        {"test": "Null", "variable": "s3:if-match", "values": ["false"]}]
    assert _locals()["probe_arn"] == "${local.bucket_arn}/${var.prefix}/sessions/_probe/*"
    assert stmts["WriteActivityMarkers"]["actions"] == ["s3:GetObject", "s3:PutObject"]
    assert stmts["WriteActivityMarkers"]["resources"] == ["${local.activity_arn}"]
    assert stmts["ReadWriteSessions"]["resources"] == ["${local.sessions_arn}"]
    marker = f"{BUCKET_ARN}/s3log/activity/2025-01-01/x"
    assert _allowed("writer", S3Call("s3:PutObject", marker, headers=frozenset({"if-none-match"})))
    assert _allowed("writer", S3Call("s3:GetObject", marker))
    assert not _allowed("writer", S3Call("s3:PutObject", f"{BUCKET_ARN}/s3log/elsewhere"))


@pytest.mark.parametrize(
    ("role", "prefixes"),
    [
        ("reader", ["${local.list_sessions}", "${local.list_activity}"]),
        ("writer", ["${local.list_sessions}", "${local.list_activity}"]),
        ("gc", ["${local.list_sessions}"]),
        ("sweep", ["${local.list_sessions}", "${local.list_activity}"]),
    ],
)
def test_listing_is_limited_to_session_folders_and_the_activity_index(role: str, prefixes: list[str]) -> None:
    stmt = _role_statements(role)["ListPrefix"]
    assert stmt["actions"] == ["s3:ListBucket"] and stmt["resources"] == ["${local.bucket_arn}"]
    assert stmt["condition"] == [{"test": "StringLike", "variable": "s3:prefix", "values": prefixes}]
    assert _locals()["list_sessions"] == "${var.prefix}/sessions/*"
    assert _locals()["list_activity"] == "${var.prefix}/activity/*"
    can_list_index = _allowed(role, S3Call("s3:ListBucket", BUCKET_ARN, prefix="s3log/activity/"))
    assert can_list_index is (role != "gc")
    assert not _allowed(role, S3Call("s3:ListBucket", BUCKET_ARN, prefix="s3log/"))
    assert not _allowed(role, S3Call("s3:ListBucket", BUCKET_ARN, prefix=""))


def test_reader_only_reads_sessions() -> None:
    stmts = _role_statements("reader")
    assert set(stmts) == {"ReadSessions", "ListPrefix", "UseKey"}
    assert stmts["ReadSessions"]["actions"] == ["s3:GetObject"]
    assert stmts["ReadSessions"]["resources"] == ["${local.sessions_arn}"]


def test_policies_stay_inside_the_prefix() -> None:
    for role in ROLES:
        for s in _statements(_role_doc(role)):
            assert s.get("effect", "Allow") == "Allow"
            for r in _expand(s["resources"]):
                assert r in (BUCKET_ARN, KMS_ARN) or r.startswith(f"{BUCKET_ARN}/s3log/"), (role, r)
            for a in _expand(s["actions"]):
                assert "*" not in a, (role, a)
    policy = _blocks("resource", "aws_iam_policy")["role"]
    assert policy["for_each"] == "${local.role_descriptions}"
    assert policy["policy"] == "${local.role_policies[each.key]}"
    assert set(_locals()["role_descriptions"]) == set(_locals()["role_policies"]) == set(ROLES)


def test_existing_policy_descriptions_are_unchanged() -> None:
    # AWS cannot change a policy's description in place: Terraform would replace the
    # policy (a new ARN) under every role it is attached to.
    assert _locals()["role_descriptions"] | {"sweep": None} == {
        "reader": "Read s3log sessions under ${var.prefix}/ in ${var.bucket_name}.",
        "writer": "Append to s3log sessions under ${var.prefix}/ in ${var.bucket_name} (no delete).",
        "gc": "Garbage-collect and delete s3log sessions under ${var.prefix}/ in ${var.bucket_name} (no write).",
        "sweep": None,
    }


def test_every_role_policy_is_an_output() -> None:
    outputs: dict[str, Any] = {}
    for block in _load(MODULE / "outputs.tf")["output"]:
        outputs.update(block)
    for role in ROLES:
        assert outputs[f"{role}_policy_arn"]["value"] == f'${{aws_iam_policy.role["{role}"].arn}}'


# --------------------------------------------------- bucket policy against the code's writes


def _denials(key: str, headers: set[str]) -> list[str]:
    """The sids of the bucket policy's Deny statements that refuse PutObject of ``key``."""
    doc = _blocks("data", "aws_iam_policy_document")["bucket"]
    call = S3Call("s3:PutObject", f"{BUCKET_ARN}/{key}", headers=frozenset(headers))
    return [s["sid"] for s in _statements(doc) if s["effect"] == "Deny" and _applies(s, call)]


def _writes(recorded: dict[str, list[tuple[str, str]]]) -> list[tuple[str, str]]:
    return [(m, k) for calls in recorded.values() for m, k in calls if m in WRITE_HEADERS]


def _kind(key: str) -> str:
    """What a key s3log writes is: head, seg, forks, activity or probe."""
    parts = key.split("/")
    if parts[1] == "activity":
        return "activity"
    if parts[2] == "_probe":
        return "probe"
    return parts[3]


def test_bucket_policy_denies_overwriting_segments_and_markers() -> None:
    doc = _blocks("data", "aws_iam_policy_document")["bucket"]
    stmt = next(s for s in _statements(doc) if s.get("sid") == "DenyOverwritingHistory")
    assert stmt["effect"] == "Deny" and stmt["actions"] == ["s3:PutObject"]
    assert stmt["principals"] == [{"type": "*", "identifiers": ["*"]}]
    assert stmt["resources"] == [
        "${local.bucket_arn}/${var.prefix}/sessions/*/seg/*",
        "${local.bucket_arn}/${var.prefix}/activity/*",
    ]
    assert stmt["condition"] == [{"test": "Null", "variable": "s3:if-none-match", "values": ["true"]}]
    dyn = next(d["statement"] for d in doc["dynamic"] if d["statement"]["content"][0] is stmt)
    assert dyn["for_each"] == "${var.enforce_create_only_history ? [1] : []}"
    assert _variables()["enforce_create_only_history"]["default"] is True
    marker = "s3log/activity/2025-01-01/01900000-0000-7000-8000-000000000000"
    assert _denials(marker, set()) == ["DenyOverwritingHistory"]
    assert _denials(marker, {"if-match"}) == ["DenyOverwritingHistory"]
    assert _denials(marker, {"if-none-match"}) == []


def test_bucket_policy_admits_every_write_s3log_makes(recorded: dict[str, list[tuple[str, str]]]) -> None:
    writes = _writes(recorded)
    assert {m for m, _ in writes} == set(WRITE_HEADERS)
    for method, key in writes:
        assert _denials(key, WRITE_HEADERS[method]) == [], f"{method} {key} would be denied"


def test_bucket_policy_denies_blind_overwrites_of_every_object_s3log_writes(
    recorded: dict[str, list[tuple[str, str]]],
) -> None:
    keys = {k for _, k in _writes(recorded)}
    kinds = {_kind(k) for k in keys}
    assert kinds == {"head", "seg", "forks", "activity", "probe"}, "the flows must write every kind of object"
    fired: set[str] = set()
    for key in keys:
        blind = _denials(key, set())
        assert blind, f"an unconditional PUT could overwrite {key}"
        fired.update(blind)
        if _kind(key) in ("seg", "activity"):
            # If-Match replaces an existing object: history is create-only. (A fork
            # marker is replaced with If-Match by a retried fork: only its key is read.)
            assert _denials(key, {"if-match"}), f"an If-Match PUT could overwrite {key}"
    assert fired == {"DenyUnconditionalHeadWrites", "DenyOverwritingHistory"}



# ------------------------------------------------------------ which resources each mode gets


def _variables(where: Path = MODULE) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in where.glob("*.tf"):
        for block in _load(path).get("variable", []):
            out.update(block)
    return out


def _eval(expr: Any, variables: dict[str, Any], local_exprs: dict[str, Any]) -> Any:
    """Evaluate the small boolean/conditional HCL expressions count and locals use here."""
    if not isinstance(expr, str):
        return expr
    e = expr[2:-1] if expr.startswith("${") and expr.endswith("}") else expr
    m = re.fullmatch(r"(.+?)\?(.+?):(.+)", e)
    if m:
        branch = m[2] if _eval(m[1].strip(), variables, local_exprs) else m[3]
        return _eval(branch.strip(), variables, local_exprs)
    py = re.sub(r"\bvar\.(\w+)", lambda v: f"({variables[v[1]]!r})", e)
    py = re.sub(r"\blocal\.(\w+)", lambda v: f"({_eval(local_exprs[v[1]], variables, local_exprs)!r})", py)
    py = py.replace("&&", " and ").replace("||", " or ")
    py = re.sub(r"!(?!=)", " not ", py)
    py = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", py)))
    return eval(py, {"__builtins__": {}}, {})  # our own .tf files, small expressions


def _counts(overrides: dict[str, Any]) -> dict[str, int]:
    variables = {name: body.get("default") for name, body in _variables().items()} | overrides
    local_exprs = _locals(MODULE / "main.tf")
    out = {}
    for kind in ("resource", "data"):
        for path in MODULE.glob("*.tf"):
            for block in _load(path).get(kind, []):
                for type_, named in block.items():
                    for name, body in named.items():
                        count = body.get("count", 1)
                        out[f"{'data.' if kind == 'data' else ''}{type_}.{name}"] = _eval(count, variables, local_exprs)
    return out


BUCKET_SETTINGS = [
    "aws_s3_bucket.this",
    "aws_s3_bucket_public_access_block.this",
    "aws_s3_bucket_ownership_controls.this",
    "aws_s3_bucket_server_side_encryption_configuration.this",
    "aws_s3_bucket_lifecycle_configuration.this",
    "aws_s3_bucket_policy.this",
]


@pytest.mark.parametrize("create", [True, False])
@pytest.mark.parametrize("versioning", [True, False])
@pytest.mark.parametrize("lock", [True, False])
def test_resources_exist_only_in_the_mode_that_needs_them(create: bool, versioning: bool, lock: bool) -> None:
    overrides = {"create_bucket": create, "versioning": versioning, "object_lock_enabled": lock}
    variables = {name: body.get("default") for name, body in _variables().items()} | overrides
    counts = _counts(overrides)
    assert counts["data.aws_s3_bucket.existing"] == int(not create)
    if not create:
        # The existing bucket's precondition refuses settings the module would not apply.
        existing = _blocks("data", "aws_s3_bucket")["existing"]
        precondition = existing["lifecycle"][0]["precondition"][0]["condition"]
        assert _eval(precondition, variables, {}) is (not (versioning or lock))
    for name in BUCKET_SETTINGS:
        assert counts[name] == int(create), name
    assert counts["aws_s3_bucket_versioning.this"] == int(create and (versioning or lock))
    assert counts["aws_s3_bucket_object_lock_configuration.this"] == int(create and lock)
    # Every bucket-level resource is accounted for above: a new one must choose its mode.
    assert {n for n in counts if n.startswith("aws_s3_bucket")} == set(BUCKET_SETTINGS) | {
        "aws_s3_bucket_versioning.this",
        "aws_s3_bucket_object_lock_configuration.this",
    }
    assert counts["aws_iam_policy.role"] == 1  # for_each over the roles, in both modes


def test_defaults_create_a_bucket_without_versioning_or_object_lock() -> None:
    counts = _counts({})
    assert counts["aws_s3_bucket.this"] == 1
    assert counts["aws_s3_bucket_versioning.this"] == 0
    assert counts["aws_s3_bucket_object_lock_configuration.this"] == 0


def test_object_lock_uses_the_chosen_mode_and_retention() -> None:
    lock = _blocks("resource", "aws_s3_bucket_object_lock_configuration")["this"]
    retention = lock["rule"][0]["default_retention"][0]
    assert retention == {"mode": "${var.object_lock_mode}", "days": "${var.object_lock_retention_days}"}
    assert lock["depends_on"] == ["${aws_s3_bucket_versioning.this}"]
    variables = _variables()
    assert variables["object_lock_enabled"]["default"] is False
    assert variables["object_lock_mode"]["default"] == "GOVERNANCE"
    condition = variables["object_lock_mode"]["validation"][0]["condition"]
    assert "GOVERNANCE" in condition and "COMPLIANCE" in condition
    assert "validation" in variables["object_lock_retention_days"]


def test_outputs_work_with_an_existing_bucket() -> None:
    outputs: dict[str, Any] = {}
    for block in _load(MODULE / "outputs.tf")["output"]:
        outputs.update(block)
    for name, body in outputs.items():
        # aws_s3_bucket.this has no instance with create_bucket = false.
        assert "aws_s3_bucket." not in body["value"], name
    assert outputs["bucket_region"]["value"] == "${local.bucket_region}"
    assert outputs["bucket_policy_json"]["value"] == "${data.aws_iam_policy_document.bucket.json}"
    local_exprs = _locals(MODULE / "main.tf")
    assert "aws_s3_bucket.this[0].region" in local_exprs["bucket_region"]
    assert "data.aws_s3_bucket.existing[0].region" in local_exprs["bucket_region"]


def test_state_of_earlier_versions_moves_instead_of_being_recreated() -> None:
    moved = {(m["from"], m["to"]) for m in _load(MODULE / "main.tf")["moved"]}
    for name in [*BUCKET_SETTINGS, "aws_s3_bucket_versioning.this"]:
        assert (f"${{{name}}}", f"${{{name}[0]}}") in moved, name


# ------------------------------------------------------------------ the Lambda example


def _example(kind: str, type_: str) -> dict[str, dict[str, Any]]:
    return _blocks(kind, type_, LAMBDA)


def test_lambda_package_is_built_by_archive_file_with_core_dependencies_only() -> None:
    archive = _example("data", "archive_file")["package"]
    assert archive["type"] == "zip"
    assert archive["source_dir"] == "${local.build_dir}"
    assert archive["depends_on"] == ["${terraform_data.package}"]
    build = _example("resource", "terraform_data")["package"]
    command = build["provisioner"][0]["local-exec"]["command"]
    installs = [line for line in command.splitlines() if " pip " in line]
    assert len(installs) == 2
    # s3log is turned into a wheel alone, then installed from that wheel without extras:
    # only [project].dependencies come along, all as binary wheels for Lambda's platform.
    assert "--no-deps" in installs[0] and installs[0].rstrip().endswith("'${local.repo_root}'")
    assert installs[1].rstrip().endswith("/.wheel/s3log-*.whl")
    assert "[" not in installs[1].split("--only-binary=:all:")[1]
    for flag in ("${local.wheel_platforms}", "--python-version ${local.wheel_python}", "--only-binary=:all:"):
        assert flag in installs[1]
    platforms = _locals(LAMBDA / "main.tf")["wheel_platforms"]
    # cbor2 ships manylinux_2_28 wheels only: without that tag the install finds nothing.
    assert "manylinux_2_28" in platforms and "--platform" in platforms
    runtime = _variables(LAMBDA)["runtime"]
    assert runtime["default"] == "python3.12" and "1[2-9]" in runtime["validation"][0]["condition"]
    assert "cp ${join(" in command
    functions = _example("resource", "aws_lambda_function")
    for fn in functions.values():
        assert fn["filename"] == "${data.archive_file.package.output_path}"
        assert fn["source_code_hash"] == "${data.archive_file.package.output_base64sha256}"


def test_every_lambda_handler_is_packaged_and_exists() -> None:
    handlers = _locals(LAMBDA / "main.tf")["handlers"]
    for fn in _example("resource", "aws_lambda_function").values():
        module, func = fn["handler"].split(".")
        assert f"{module}.py" in handlers
        tree = ast.parse((ROOT / "scripts" / f"{module}.py").read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == func for n in tree.body), fn["handler"]
    inputs = _locals(LAMBDA / "main.tf")["package_inputs"]
    assert "pyproject.toml" in inputs and "s3log/**/*.py" in inputs and "scripts/${h}" in inputs


def test_worker_reserves_no_concurrency_by_default() -> None:
    assert _variables(LAMBDA)["reserved_concurrency"]["default"] is None
    worker = _example("resource", "aws_lambda_function")["worker"]
    assert worker["reserved_concurrent_executions"] == "${var.reserved_concurrency}"
    assert "reserved_concurrent_executions" not in _example("resource", "aws_lambda_function")["sweep"]


def test_traced_functions_may_send_traces() -> None:
    attachments = _example("resource", "aws_iam_role_policy_attachment").values()
    functions = _example("resource", "aws_lambda_function")
    for fn in functions.values():
        assert fn["tracing_config"][0]["mode"] == "Active"
        role = fn["role"].removeprefix("${").removesuffix(".arn}")
        xray = [a for a in attachments if a["policy_arn"].endswith("/AWSXRayDaemonWriteAccess")]
        assert any(a["role"] == f"${{{role}.name}}" for a in xray), role


def test_sweep_runs_on_a_schedule() -> None:
    rule = _example("resource", "aws_cloudwatch_event_rule")["sweep"]
    assert rule["schedule_expression"] == "${var.sweep_schedule}"
    target = _example("resource", "aws_cloudwatch_event_target")["sweep"]
    assert target == {"rule": "${aws_cloudwatch_event_rule.sweep.name}", "arn": "${aws_lambda_function.sweep.arn}"}
    permission = _example("resource", "aws_lambda_permission")["sweep"]
    assert permission["principal"] == "events.amazonaws.com"
    assert permission["action"] == "lambda:InvokeFunction"
    assert permission["function_name"] == "${aws_lambda_function.sweep.function_name}"
    assert permission["source_arn"] == "${aws_cloudwatch_event_rule.sweep.arn}"
    sweep = _example("resource", "aws_lambda_function")["sweep"]
    assert sweep["handler"] == "sweep_lambda.handler"
    env = sweep["environment"][0]["variables"]
    assert env["S3LOG_IDLE_DAYS"] == "${tostring(var.idle_days)}"
    assert env["S3LOG_GC_OLDER_THAN_MINUTES"] == "${tostring(var.gc_older_than_minutes)}"


def test_sweep_function_gets_the_modules_sweep_policy_and_its_own_logs() -> None:
    # Its S3 and KMS permissions are the module's sweep policy, which the role tests
    # above check against the recorded expire + gc calls; inline, only its log group.
    attachments = _example("resource", "aws_iam_role_policy_attachment")
    assert attachments["sweep_s3"] == {"role": "${aws_iam_role.sweep.name}",
                                       "policy_arn": "${module.s3log.sweep_policy_arn}"}
    s3_policies = {a["policy_arn"] for a in attachments.values() if a["policy_arn"].startswith("${module.s3log.")}
    assert s3_policies == {"${module.s3log.sweep_policy_arn}", "${module.s3log.writer_policy_arn}"}
    assert attachments["writer"]["role"] == "${aws_iam_role.worker.name}"
    doc = _example("data", "aws_iam_policy_document")["sweep"]
    (own,) = _statements(doc)
    assert own["sid"] == "OwnLogs" and own["actions"] == ["logs:CreateLogStream", "logs:PutLogEvents"]
    assert own["resources"] == ["${aws_cloudwatch_log_group.sweep.arn}:*"]
    inline = _example("resource", "aws_iam_role_policy")["sweep"]
    assert inline["role"] == "${aws_iam_role.sweep.id}"
    assert inline["policy"] == "${data.aws_iam_policy_document.sweep.json}"
    sweep = _example("resource", "aws_lambda_function")["sweep"]
    assert "${aws_iam_role_policy_attachment.sweep_s3}" in sweep["depends_on"]


# ------------------------------------------------------------ scripts/sweep_lambda.py


@pytest.fixture
def sweep(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A fresh import of scripts/sweep_lambda.py (a fresh "container")."""
    spec = importlib.util.spec_from_file_location("sweep_lambda", ROOT / "scripts" / "sweep_lambda.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "sweep_lambda", module)
    spec.loader.exec_module(module)
    yield module
    if module._LOG is not None:
        module._LOG.close()


class _Spy:
    """Counts the stores built and the expire/gc calls made through a patched s3log."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, with_expire: bool) -> None:
        self.stores = 0
        self.expire_calls: list[dict[str, Any]] = []
        self.gc_calls: list[dict[str, Any]] = []
        spy = self

        def make_store(**kw: Any) -> s3log.MemoryStore:
            spy.stores += 1
            return s3log.MemoryStore()

        class SpyLog(s3log.Log):
            def gc(self, **kw: Any) -> Any:
                spy.gc_calls.append(kw)
                return super().gc(**kw)

        if with_expire:

            def expire(self: Any, **kw: Any) -> dict[str, int]:
                spy.expire_calls.append(kw)
                return {"expired": 0}

            SpyLog.expire = expire  # type: ignore[attr-defined]
        else:
            # An s3log from before Log.expire, whatever the installed one has.
            def no_expire(self: Any) -> Any:
                raise AttributeError("expire")

            SpyLog.expire = property(no_expire)  # type: ignore[attr-defined]
        monkeypatch.setattr(s3log, "S3Store", make_store)
        monkeypatch.setattr(s3log, "Log", SpyLog)


@pytest.mark.parametrize("with_expire", [True, False])
def test_sweep_handler_builds_the_client_once_and_passes_its_settings(
    sweep: ModuleType, monkeypatch: pytest.MonkeyPatch, with_expire: bool
) -> None:
    spy = _Spy(monkeypatch, with_expire=with_expire)
    monkeypatch.setenv("S3LOG_BUCKET", "b")
    monkeypatch.setenv("S3LOG_IDLE_DAYS", "7")
    monkeypatch.setenv("S3LOG_GC_OLDER_THAN_MINUTES", "90")
    first = sweep.handler({}, None)
    second = sweep.handler({}, None)
    assert spy.stores == 1, "one client per container, not per invocation"
    assert spy.gc_calls == [{"older_than_ms": 90 * 60_000, "dry_run": False}] * 2
    if with_expire:
        assert spy.expire_calls == [{"idle_for": timedelta(days=7), "dry_run": False}] * 2
        assert first["expire"] == {"expired": 0}
    else:
        assert first["expire"] is None
    assert first == second
    assert first["gc"] == {"sessions": 0, "unreferenced": 0, "deleted": 0, "kept_young": 0, "broken": 0,
                           "failed": 0}


def test_sweep_handler_fails_when_gc_could_not_delete(sweep: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    # A sweep whose deletes are refused (a role without what S3 requires) must not look done.
    _Spy(monkeypatch, with_expire=True)
    monkeypatch.setenv("S3LOG_BUCKET", "b")
    refused = GcReport(1, ["k1"], [], 0, [], {"k1": "AccessDenied: Access Denied"})
    monkeypatch.setattr(s3log.Log, "gc", lambda self, **kw: refused)
    with pytest.raises(sweep.SweepIncomplete, match=r"could not delete 1 objects .*k1: AccessDenied"):
        sweep.handler({}, None)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("S3LOG_IDLE_DAYS", "0"),
        ("S3LOG_IDLE_DAYS", "a week"),
        ("S3LOG_GC_OLDER_THAN_MINUTES", "-5"),
        ("S3LOG_DRY_RUN", "yes"),
    ],
)
def test_sweep_handler_rejects_bad_settings_before_touching_the_store(
    sweep: ModuleType, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    spy = _Spy(monkeypatch, with_expire=True)
    monkeypatch.setenv("S3LOG_BUCKET", "b")
    monkeypatch.setenv(name, value)
    with pytest.raises(sweep.SweepConfigError, match=name) as info:
        sweep.handler({}, None)
    assert isinstance(info.value, s3log.S3LogError) and isinstance(info.value, ValueError)
    assert spy.stores == 0 and spy.gc_calls == [] and spy.expire_calls == []


def test_sweep_handler_against_s3(sweep: ModuleType, monkeypatch: pytest.MonkeyPatch, s3log_server: Any) -> None:
    bucket = s3log_server.create_bucket()
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    w = log.create()
    w.append("k", 1)
    w.commit()
    # Garbage younger than the grace period: found, kept.
    log.store.put_if_absent(f"s3log/sessions/{w.session_id}/seg/000000000999-{'0' * 64}.cbor", b"x")
    log.close()
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3log_server.endpoint_url)
    monkeypatch.setenv("S3LOG_BUCKET", bucket)
    monkeypatch.setenv("S3LOG_DRY_RUN", "1")
    out = sweep.handler({}, None)
    assert out["dry_run"] is True
    assert out["gc"] == {"sessions": 1, "unreferenced": 0, "deleted": 0, "kept_young": 1, "broken": 0,
                         "failed": 0}
