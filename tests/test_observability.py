"""OpenTelemetry spans: one per verb after the GenAI memory conventions, a CLIENT
span per store request beneath it, a fork as an event naming both sessions; and a
module-level None tracer (no API installed) takes the plain path."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import s3log
from s3log import otel
from s3log.agent import AgentSession
from s3log.store.memory import MemoryStore

STORE_ID = "bucket-a/s3log"


def BucketStore() -> MemoryStore:  # noqa: N802 (reads as the store it makes)
    """A MemoryStore naming its bucket, as S3 stores do."""
    return MemoryStore("bucket-a")


class DenyingStore(MemoryStore):
    """Refuses every GET as S3 does, with the request id of its reply."""

    def get(self, key: str) -> Any:
        raise s3log.StoreError("Access Denied", key=key, code="AccessDenied", status=403, request_id="REQ-42")


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # A tracer of this provider, not the global one (set once per process).
    monkeypatch.setattr(otel, "TRACER", provider.get_tracer("s3log"))
    yield exporter
    provider.shutdown()


def _named(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_a_commit_is_an_update_memory_span_over_its_requests(spans: InMemorySpanExporter) -> None:
    log = s3log.Log(BucketStore())
    w = log.create()
    w.append("k", 1)
    spans.clear()
    w.commit()
    (commit,) = _named(spans, f"update_memory {STORE_ID}")
    assert commit.kind == trace.SpanKind.INTERNAL
    assert dict(commit.attributes) == {
        "gen_ai.operation.name": "update_memory", "gen_ai.memory.store.id": STORE_ID,
        "gen_ai.conversation.id": w.session_id, "gen_ai.memory.record.count": 1, "s3log.operation": "commit"}
    requests = [s for s in spans.get_finished_spans() if s.name.startswith("S3.")]
    # One conditional PUT of the head, its child; exactly the requests the store saw.
    assert [s.name for s in requests] == ["S3.PutObject"]
    (put,) = requests
    assert put.kind == trace.SpanKind.CLIENT and put.parent.span_id == commit.context.span_id
    assert put.attributes["aws.s3.bucket"] == "bucket-a"
    assert put.attributes["aws.s3.key"] == f"s3log/sessions/{w.session_id}/head"
    assert put.attributes["s3log.condition"] == "If-Match"
    assert put.attributes["rpc.method"] == "PutObject" and put.attributes["rpc.system"] == "aws-api"


def test_a_conflict_fork_is_an_event_naming_both_sessions(spans: InMemorySpanExporter) -> None:
    log = s3log.Log(BucketStore())
    a = log.create()
    b = log.open(a.session_id)
    a.append("k", 1)
    a.commit()
    b.append("k", 2)
    spans.clear()
    result = b.commit()
    assert result.fork is not None
    (commit,) = _named(spans, f"update_memory {STORE_ID}")
    (event,) = [e for e in commit.events if e.name == "s3log.fork"]
    assert dict(event.attributes) == {
        "s3log.fork.parent": a.session_id, "s3log.fork.child": result.fork.child,
        "s3log.fork.parent_seq": result.fork.parent.seq, "s3log.fork.reason": "conflict"}
    # The commit ended in the fork: that is the conversation it names.
    assert commit.attributes["gen_ai.conversation.id"] == result.fork.child != a.session_id


def test_read_fork_and_expire_spans(spans: InMemorySpanExporter) -> None:
    log = s3log.Log(BucketStore())
    w = log.create()
    w.append("k", 1)
    w.append("k", 2)
    w.commit()
    spans.clear()
    log.read(w.session_id)
    (read,) = _named(spans, f"search_memory {STORE_ID}")
    assert read.attributes["gen_ai.operation.name"] == "search_memory"
    assert read.attributes["gen_ai.conversation.id"] == w.session_id
    assert read.attributes["gen_ai.memory.record.count"] == 2
    gets = [s for s in spans.get_finished_spans() if s.name == "S3.GetObject"]
    assert gets and all(s.parent.span_id == read.context.span_id for s in gets)

    child = log.fork(w.session_id)
    (fork,) = _named(spans, f"create_memory {STORE_ID}")
    assert fork.attributes["gen_ai.conversation.id"] == child
    assert fork.attributes["s3log.fork.parent"] == w.session_id
    assert [dict(e.attributes) for e in fork.events] == [
        {"s3log.fork.parent": w.session_id, "s3log.fork.child": child, "s3log.fork.reason": "explicit"}]

    log.expire(idle_for=1, dry_run=True)
    (sweep,) = _named(spans, f"delete_memory {STORE_ID}")
    assert sweep.attributes["gen_ai.operation.name"] == "delete_memory"
    assert sweep.attributes["s3log.expire.examined"] == 2
    assert "gen_ai.conversation.id" not in sweep.attributes
    # The parallel head reads of the sweep are its children too (the pool runs in its context).
    requests = [s for s in spans.get_finished_spans() if s.name.startswith("S3.") and s.start_time >= sweep.start_time]
    assert requests and all(s.parent is not None and s.parent.span_id == sweep.context.span_id for s in requests)


def test_restore_is_a_span(spans: InMemorySpanExporter) -> None:
    log = s3log.Log(BucketStore())
    session = AgentSession.create(log)
    session.user_input("hello")
    session.close()
    spans.clear()
    restored = AgentSession.restore(log, session.session_id, force=True)  # repairs the open turn
    (span,) = [s for s in spans.get_finished_spans() if s.attributes.get("s3log.operation") == "restore"]
    assert span.name == f"update_memory {STORE_ID}"
    assert span.attributes["gen_ai.conversation.id"] == restored.session_id == session.session_id


def test_a_failed_request_carries_the_stores_request_id(spans: InMemorySpanExporter) -> None:
    sid = "0190a000-0000-7000-8000-000000000001"
    with pytest.raises(s3log.StoreError):
        s3log.Log(DenyingStore("bucket-a")).read(sid)
    (get,) = [s for s in spans.get_finished_spans() if s.name == "S3.GetObject"]
    assert get.status.status_code == trace.StatusCode.ERROR
    assert get.attributes["aws.request_id"] == "REQ-42" and get.attributes["http.response.status_code"] == 403
    assert get.attributes["error.type"] == "StoreError"
    assert get.attributes["aws.s3.key"] == f"s3log/sessions/{sid}/head"
    (read,) = _named(spans, f"search_memory {STORE_ID}")
    assert read.status.status_code == trace.StatusCode.ERROR


def test_async_commit_spans(spans: InMemorySpanExporter) -> None:
    async def main() -> tuple[str, list[str]]:
        store = s3log.AsyncMemoryStore(BucketStore())
        log = s3log.AsyncLog(store)
        w = await log.create()
        w.append("k", 1)
        spans.clear()
        await w.commit()
        return w.session_id, [s.name for s in spans.get_finished_spans()]

    sid, names = asyncio.run(main())
    assert names == ["S3.PutObject", f"update_memory {STORE_ID}"]
    (commit,) = _named(spans, f"update_memory {STORE_ID}")
    (put,) = _named(spans, "S3.PutObject")
    assert put.parent.span_id == commit.context.span_id and commit.attributes["gen_ai.conversation.id"] == sid


def test_without_the_api_no_span_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    # As when opentelemetry-api is not importable: the plain path, no span helper called.
    monkeypatch.setattr(otel, "TRACER", None)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a span helper ran without a tracer")

    monkeypatch.setattr(otel, "verb_span", never)
    monkeypatch.setattr(otel, "request_span", never)
    log = s3log.Log(BucketStore())
    w = log.create()
    w.append("k", 1)
    w.commit()
    assert [e.data for e in log.read(w.session_id).entries][-1] == 1
    log.fork(w.session_id)
    log.expire(idle_for=1, dry_run=True)
