"""Optional OpenTelemetry spans (the ``otel`` extra: ``pip install "s3log[otel]"``).

With ``opentelemetry-api`` importable, the verbs of :class:`~s3log.Log`,
:class:`~s3log.AsyncLog`, their writers and the agent sessions' ``restore`` make one
span each, named and attributed after the OpenTelemetry GenAI memory conventions
(``gen_ai.operation.name``, ``gen_ai.memory.store.id`` = ``<bucket>/<prefix>``,
``gen_ai.conversation.id`` = the session id), and every request the drivers make to
the store is a child ``CLIENT`` span (``aws.s3.bucket``, ``aws.s3.key``, and
``aws.request_id`` when the store's reply carries one, as its errors do). A fork is an
event on the span of the commit that made it, naming both sessions and the reason.

The spans belong to the drivers and the log API, never to the sans-IO protocol: the
procedures yield ops, and the driver that performs an op opens its span.

Without the API :data:`TRACER` is None: each call site checks it and runs the plain
path, so a commit costs what it did (docs/benchmarks.md). With the API but no tracer
provider set by the application (no SDK), :func:`recording` is False and the same
plain path runs. docs/operations.md,
"Observability", lists the spans and attributes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from s3log._protocol.ops import Delete, DeleteIfMatch, Get, ListKeys, PutIfAbsent, PutIfMatch, StoreOp
from s3log.errors import StoreError

if TYPE_CHECKING:
    from s3log.results import CommitResult, ExpireReport, ForkInfo

try:
    from opentelemetry import trace as _trace

    _HAVE_OTEL = True
except ImportError:  # the otel extra is not installed: every call site takes its plain path
    _HAVE_OTEL = False

__all__ = ["OPERATIONS", "TRACER", "committed", "expired", "fork_event", "forked", "recording", "request_span",
           "restored", "store_id", "verb_span"]

#: The tracer s3log's spans come from (instrumentation scope ``s3log``), or None
#: without ``opentelemetry-api``.
TRACER: Any = None
if _HAVE_OTEL:
    TRACER = _trace.get_tracer("s3log")

def recording() -> bool:
    """Whether a span made now would be recorded: False while the application has set
    no tracer provider (the API alone, no SDK), so a commit then costs what it does
    without the API. Only called once :data:`TRACER` is known not to be None."""
    return not (isinstance(TRACER, _trace.ProxyTracer)
                and isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider))


#: Each verb's GenAI memory operation (``gen_ai.operation.name``).
OPERATIONS: Mapping[str, str] = {
    "commit": "update_memory",
    "restore": "update_memory",
    "read": "search_memory",
    "fork": "create_memory",
    "expire": "delete_memory",
}

#: The S3 API operation each store op is (``rpc.method``).
_METHODS: Mapping[type, str] = {
    Get: "GetObject", PutIfAbsent: "PutObject", PutIfMatch: "PutObject", ListKeys: "ListObjectsV2",
    Delete: "DeleteObject", DeleteIfMatch: "DeleteObject",
}


def store_id(store: object, prefix: str) -> str:
    """``gen_ai.memory.store.id``: ``<bucket>/<prefix>``, or the prefix of a store with no bucket."""
    bucket = getattr(store, "bucket", None)
    return f"{bucket}/{prefix}" if isinstance(bucket, str) and bucket else prefix


@contextmanager
def verb_span(verb: str, store: str, session: str | None = None, **attributes: Any) -> Iterator[Any]:
    """The span of one verb (``commit``, ``read``, ``fork``, ``expire``, ``restore``):
    ``<operation> <store id>``, an ``INTERNAL`` span the store requests are children of."""
    operation = OPERATIONS[verb]
    attrs: dict[str, Any] = {"gen_ai.operation.name": operation, "gen_ai.memory.store.id": store,
                             "s3log.operation": verb}
    if session is not None:
        attrs["gen_ai.conversation.id"] = session
    attrs.update({k: v for k, v in attributes.items() if v is not None})
    with TRACER.start_as_current_span(f"{operation} {store}", attributes=attrs) as span:
        yield span


def committed(span: Any, result: CommitResult[Any]) -> None:
    """What a commit did, on its span: the session it ended in, the entries stored, each fork."""
    span.set_attribute("gen_ai.conversation.id", result.session_id)
    span.set_attribute("gen_ai.memory.record.count", len(result.acked))
    for fork in result.forks:
        fork_event(span, fork)


def forked(span: Any, parent: str, child: str) -> None:
    """An explicit fork on its span: the new session, and the event linking the two."""
    span.set_attribute("gen_ai.conversation.id", child)
    span.set_attribute("s3log.fork.parent", parent)
    span.add_event("s3log.fork", {"s3log.fork.parent": parent, "s3log.fork.child": child,
                                  "s3log.fork.reason": "explicit"})


def expired(span: Any, report: ExpireReport) -> None:
    """What a sweep did, on its span."""
    span.set_attribute("gen_ai.memory.record.count", len(report.expired))
    span.set_attribute("s3log.expire.examined", report.examined)
    span.set_attribute("s3log.expire.raced", len(report.raced))


def restored(span: Any, session: str) -> None:
    """The session a restore continues in (a newer fork with ``follow_forks``)."""
    span.set_attribute("gen_ai.conversation.id", session)


def fork_event(span: Any, fork: ForkInfo) -> None:
    """A fork as an event linking the two sessions (parent, child) and the reason."""
    span.add_event("s3log.fork", {
        "s3log.fork.parent": fork.parent.session, "s3log.fork.child": fork.child,
        "s3log.fork.parent_seq": fork.parent.seq, "s3log.fork.reason": fork.parent.reason or "",
    })


def _request_attributes(store: object, op: StoreOp) -> tuple[str, dict[str, Any]]:
    method = _METHODS[type(op)]
    attrs: dict[str, Any] = {"rpc.system": "aws-api", "rpc.service": "S3", "rpc.method": method}
    bucket = getattr(store, "bucket", None)
    if isinstance(bucket, str):
        attrs["aws.s3.bucket"] = bucket
    if isinstance(op, ListKeys):
        attrs["s3log.list.prefix"] = op.prefix
    else:
        attrs["aws.s3.key"] = op.key
    if isinstance(op, PutIfAbsent):
        attrs["s3log.condition"] = "If-None-Match"
    elif isinstance(op, PutIfMatch | DeleteIfMatch):
        attrs["s3log.condition"] = "If-Match"
    return f"S3.{method}", attrs


@contextmanager
def request_span(store: object, op: StoreOp) -> Iterator[Any]:
    """The ``CLIENT`` span of one request (one attempt: a retried request is one span
    per attempt). A store error ends it with the error, its code and request id."""
    assert _HAVE_OTEL
    name, attrs = _request_attributes(store, op)
    with TRACER.start_as_current_span(name, kind=_trace.SpanKind.CLIENT, attributes=attrs) as span:
        try:
            yield span
        except StoreError as exc:
            request_id = getattr(exc, "request_id", None)
            if request_id:
                span.set_attribute("aws.request_id", request_id)
            status = getattr(exc, "status", None)
            if isinstance(status, int):
                span.set_attribute("http.response.status_code", status)
            span.set_attribute("error.type", type(exc).__name__)
            raise
