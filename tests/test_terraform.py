"""The Terraform module's safety properties, checked by parsing the .tf files (no network).

The IAM test derives the S3 actions each role needs from s3log's own code: which store
methods each workflow calls (recorded on a real run), and which S3 API calls each
method of :class:`~s3log.S3Store` makes (read from its source), so the policies and
the code cannot drift apart.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import hcl2
import pytest

import s3log
from s3log.agent import AgentSession
from s3log.store import s3 as s3_module

TF = Path(__file__).resolve().parent.parent / "terraform"
MODULE = TF / "modules" / "s3log-bucket"


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items() if k != "__is_block__"}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _load(path: Path) -> dict[str, Any]:
    with path.open() as f:
        return _clean(hcl2.load(f))  # type: ignore[no-any-return]


def _blocks(kind: str, type_: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in MODULE.glob("*.tf"):
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
    assert head["resources"] == ["${aws_s3_bucket.this.arn}/${var.prefix}/sessions/*/head"]
    conds = {(c["test"], c["variable"], tuple(c["values"])) for c in head["condition"]}
    assert conds == {("Null", "s3:if-match", ("true",)), ("Null", "s3:if-none-match", ("true",))}


def test_lifecycle_aborts_multipart_uploads_and_expires_noncurrent_versions() -> None:
    rules = {r["id"]: r for r in _blocks("resource", "aws_s3_bucket_lifecycle_configuration")["this"]["rule"]}
    assert rules["abort-incomplete-multipart-uploads"]["status"] == "Enabled"
    assert "abort_incomplete_multipart_upload" in rules["abort-incomplete-multipart-uploads"]
    nv = rules["expire-noncurrent-versions"]
    assert "var.versioning" in nv["status"] and "noncurrent_version_expiration" in nv


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
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "client"
            ):
                assert node.func.attr in BOTO_TO_IAM, f"S3Store.{fn.name} calls {node.func.attr}: map it to IAM"
                calls.add(BOTO_TO_IAM[node.func.attr])
        if calls:
            out[fn.name] = calls
    return out


class Recording(s3log.MemoryStore):
    """A MemoryStore that remembers which store methods were called."""

    def __init__(self) -> None:
        super().__init__()
        self.used: set[str] = set()

    def get(self, key: str) -> Any:
        self.used.add("get")
        return super().get(key)

    def put_if_absent(self, key: str, body: bytes) -> str:
        self.used.add("put_if_absent")
        return super().put_if_absent(key, body)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.used.add("put_if_match")
        return super().put_if_match(key, body, etag)

    def list(self, prefix: str, **kw: Any) -> Any:
        self.used.add("list")
        return super().list(prefix, **kw)

    def delete(self, key: str) -> None:
        self.used.add("delete")
        super().delete(key)


def _writer_flows(log: s3log.Log) -> str:
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
    list(log.list_sessions())
    log.children(other.session_id)
    log.lineage(w.session_id)
    a = AgentSession.create(log)
    a.user_input("x")
    a.turn_end()
    AgentSession.restore(log, a.session_id)
    return other.session_id


def _reader_flows(log: s3log.Log, sid: str) -> None:
    log.read(sid)
    log.verify(sid)
    log.head(sid)
    list(log.list_sessions())
    log.children(sid)
    log.lineage(sid)


def _actions(used: set[str]) -> set[str]:
    per = _s3_actions_per_store_method()
    return set().union(*(per[m] for m in used))


def _locals() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for block in _load(MODULE / "iam.tf")["locals"]:
        out.update(block)
    return out


def _policy_actions(role: str) -> set[str]:
    doc = _blocks("data", "aws_iam_policy_document")["role"]
    actions = set(_locals()["role_object_actions"][role])
    for s in _statements(doc):
        if s["actions"] != "${each.value}":
            actions |= {a for a in s["actions"] if a.startswith("s3:")}
    return actions


@pytest.fixture(scope="module")
def derived() -> dict[str, set[str]]:
    store = Recording()
    log = s3log.Log(store)
    sid = _writer_flows(log)
    writer = _actions(store.used)
    store.used.clear()
    _reader_flows(log, sid)
    reader = _actions(store.used)
    store.used.clear()
    log.delete(sid)
    log.gc(older_than_ms=0)
    gc = writer | _actions(store.used)
    return {"writer": writer, "reader": reader, "gc": gc}


@pytest.mark.parametrize("role", ["writer", "reader", "gc"])
def test_policy_grants_exactly_the_s3_calls_the_code_makes(role: str, derived: dict[str, set[str]]) -> None:
    assert _policy_actions(role) == derived[role]


def test_writer_cannot_delete_and_policies_stay_inside_the_prefix(derived: dict[str, set[str]]) -> None:
    assert "s3:DeleteObject" not in derived["writer"]
    doc = _blocks("data", "aws_iam_policy_document")["role"]
    assert doc["for_each"] == "${local.role_object_actions}"
    for s in _statements(doc):
        for r in s["resources"]:
            assert r != "*"
        if s["actions"] == ["s3:ListBucket"]:
            assert s["resources"] == ["${aws_s3_bucket.this.arn}"]
            assert s["condition"][0]["variable"] == "s3:prefix"
            assert s["condition"][0]["values"] == ["${local.list_prefix}"]
        elif s["actions"] == "${each.value}":
            assert s["resources"] == ["${local.objects_arn}"]
        else:
            assert s["sid"] == "UseKey" and s["resources"] == ["${var.kms_key_arn}"]
    assert _locals()["objects_arn"] == "${aws_s3_bucket.this.arn}/${var.prefix}/*"
