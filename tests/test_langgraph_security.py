"""Stored checkpoints are data: a planted payload naming a callable is never called.

Whoever can write to the bucket can write any entry into a thread's session (with
s3log itself, as below). LangGraph's serializer rebuilds objects from msgpack ext
values that name a module and a callable; in its permissive default that imports and
calls whatever the payload names. The saver must only ever rebuild allowlisted types.
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import pickle
from pathlib import Path
from typing import Annotated, Any, TypedDict

import ormsgpack
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde._msgpack import STRICT_MSGPACK_ENABLED
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph

import s3log
from s3log.integrations.langgraph import S3LogSaver, session_for
from s3log.testing.plugin import LocalS3
from tests.helpers import one_node_graph

# msgpack ext codes LangGraph's JsonPlusSerializer reads as "import module.name, call it".
EXT_CALL_ONE_ARG = 0
EXT_CALL_POS_ARGS = 1
EXT_CALL_KW_ARGS = 2

CALLS: list[Any] = []


def planted(*args: Any, **kwargs: Any) -> str:
    """What a planted payload names: records that it was called."""
    CALLS.append((args, kwargs))
    return "called"


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    CALLS.clear()


def _ext(code: int, module: str, name: str, args: Any) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb((module, name, args)))


def _plant(log: s3log.Log, thread: str, *, checkpoint_value: Any = "ok", metadata_value: Any = "ok",
           write_value: Any = None, tag: str = "msgpack", body: bytes | None = None) -> str:
    """Write a thread's session as an attacker with bucket access would: raw entries."""
    cp = empty_checkpoint()
    cp["channel_values"] = {"steps": checkpoint_value}
    cp["channel_versions"] = {"steps": 1}
    writer = log.create(session_for(thread, ""), meta={"langgraph": {"thread_id": thread, "checkpoint_ns": ""}})
    writer.append("lg.checkpoint", {
        "id": cp["id"],
        "parent_id": None,
        "checkpoint": [tag, body if body is not None else ormsgpack.packb(cp)],
        "metadata": ["msgpack", ormsgpack.packb({"source": "input", "step": -1, "note": metadata_value})],
    })
    if write_value is not None:
        writer.append("lg.writes", {
            "checkpoint_id": cp["id"], "task_id": "t1", "task_path": "",
            "writes": [[0, "steps", ["msgpack", ormsgpack.packb(write_value)]]],
        })
    writer.commit()
    return cp["id"]


def _log(server: LocalS3) -> s3log.Log:
    return s3log.Log(s3log.S3Store(server.create_bucket(), endpoint_url=server.endpoint_url))


@pytest.mark.parametrize("code,args", [
    (EXT_CALL_ONE_ARG, "touch"),
    (EXT_CALL_POS_ARGS, ["touch", "twice"]),
    (EXT_CALL_KW_ARGS, {"cmd": "touch"}),
])
@pytest.mark.parametrize("where", ["checkpoint", "metadata", "pending write"])
def test_a_planted_callable_is_never_called_on_read(s3log_server: LocalS3, code: int, args: Any, where: str) -> None:
    log = _log(s3log_server)
    payload = _ext(code, planted.__module__, planted.__name__, args)
    field = {"checkpoint": "checkpoint_value", "metadata": "metadata_value", "pending write": "write_value"}[where]
    _plant(log, "victim", **{field: payload})
    tup = S3LogSaver(log).get_tuple({"configurable": {"thread_id": "victim", "checkpoint_ns": ""}})
    assert CALLS == []
    assert tup is not None
    # What comes back is the payload's inert argument data, not the callable's result.
    value = {
        "checkpoint": lambda: tup.checkpoint["channel_values"]["steps"],
        "metadata": lambda: tup.metadata["note"],
        "pending write": lambda: tup.pending_writes[0][2],
    }[where]()
    assert value != "called"
    assert value == (list(args) if isinstance(args, list) else args)


def test_a_planted_os_system_does_not_run(s3log_server: LocalS3, tmp_path: Path) -> None:
    log = _log(s3log_server)
    target = tmp_path / "pwned"
    _plant(log, "victim", checkpoint_value=_ext(EXT_CALL_ONE_ARG, "os", "system", f"touch {target}"))
    saver = S3LogSaver(log)
    saver.get_tuple({"configurable": {"thread_id": "victim", "checkpoint_ns": ""}})
    list(saver.list(None))
    asyncio.run(saver.aget_tuple({"configurable": {"thread_id": "victim", "checkpoint_ns": ""}}))
    assert not target.exists()


def test_a_graph_resuming_a_planted_thread_calls_nothing(s3log_server: LocalS3) -> None:
    log = _log(s3log_server)
    _plant(log, "victim", checkpoint_value=[_ext(EXT_CALL_ONE_ARG, planted.__module__, planted.__name__, "x")])
    app = one_node_graph(S3LogSaver(log))
    cfg = {"configurable": {"thread_id": "victim"}}
    app.get_state(cfg)
    list(app.get_state_history(cfg))
    app.invoke({"steps": ["next"]}, cfg)
    assert CALLS == []


class Exploit:
    """Pickles to a call of ``planted``."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (planted, ("from pickle",))


@pytest.mark.parametrize("tag,body", [
    ("pickle", pickle.dumps(Exploit())),
    ("json", b'{"lc": 2, "type": "constructor", "id": ["' + planted.__module__.encode() + b'", "planted"]}'),
], ids=["pickle", "json"])
def test_payloads_in_formats_the_saver_never_writes_are_refused(s3log_server: LocalS3, tag: str, body: bytes) -> None:
    log = _log(s3log_server)
    _plant(log, "victim", tag=tag, body=body)
    with pytest.raises(s3log.S3LogError, match=tag):
        S3LogSaver(log).get_tuple({"configurable": {"thread_id": "victim", "checkpoint_ns": ""}})
    assert CALLS == []


# ------------------------------------------------------------------ the allowlist


@dataclasses.dataclass
class Point:
    """A user type kept in graph state."""

    x: int
    y: int


class PointState(TypedDict):
    points: Annotated[list[Any], operator.add]


def _point_graph(saver: Any) -> Any:
    g = StateGraph(PointState)
    g.add_node("a", lambda s: {"points": [Point(1, 2)]})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    return g.compile(checkpointer=saver)


def test_own_types_are_rebuilt_only_when_allowed(s3log_server: LocalS3) -> None:
    log = _log(s3log_server)
    cfg = {"configurable": {"thread_id": "points"}}
    _point_graph(S3LogSaver(log)).invoke({"points": []}, cfg)
    # Not allowlisted: the stored fields come back as plain data.
    assert _point_graph(S3LogSaver(log)).get_state(cfg).values["points"] == [{"x": 1, "y": 2}]
    for allowed in ([(Point.__module__, "Point")], [Point]):
        got = _point_graph(S3LogSaver(log, allowed_types=allowed)).get_state(cfg).values["points"]
        assert got == [Point(1, 2)]


def test_planted_payload_naming_an_allowed_module_but_other_name_is_inert(s3log_server: LocalS3) -> None:
    log = _log(s3log_server)
    _plant(log, "victim", checkpoint_value=_ext(EXT_CALL_KW_ARGS, Point.__module__, "planted", {"x": 1}))
    saver = S3LogSaver(log, allowed_types=[Point])
    tup = saver.get_tuple({"configurable": {"thread_id": "victim", "checkpoint_ns": ""}})
    assert tup is not None and tup.checkpoint["channel_values"]["steps"] == {"x": 1}
    assert CALLS == []


@dataclasses.dataclass
class Local:
    """A user type named in a graph's state schema."""

    v: int


class LocalState(TypedDict):
    item: Local


def test_langgraph_strict_mode_adds_the_state_schema_types(s3log_server: LocalS3,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With LANGGRAPH_STRICT_MSGPACK set, compile() allowlists the state schema's types."""
    import langgraph._internal._serde as lg_serde

    log = _log(s3log_server)
    cfg = {"configurable": {"thread_id": "points"}}
    g = StateGraph(LocalState)
    g.add_node("a", lambda s: {"item": Local(7)})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    monkeypatch.setattr(lg_serde, "STRICT_MSGPACK_ENABLED", True)
    app = g.compile(checkpointer=S3LogSaver(log))
    app.invoke({"item": Local(0)}, cfg)
    assert app.get_state(cfg).values["item"] == Local(7)


@pytest.mark.parametrize("serde", [
    # The plain constructor is permissive unless LANGGRAPH_STRICT_MSGPACK is set.
    pytest.param(JsonPlusSerializer(), marks=pytest.mark.skipif(
        STRICT_MSGPACK_ENABLED, reason="LANGGRAPH_STRICT_MSGPACK makes the default strict")),
    JsonPlusSerializer(allowed_msgpack_modules=True),
    JsonPlusSerializer(allowed_msgpack_modules=None, pickle_fallback=True),
])
def test_a_permissive_serializer_is_refused(serde: Any) -> None:
    with pytest.raises(s3log.S3LogError, match="serializer"):
        S3LogSaver(s3log.Log(s3log.MemoryStore()), serde=serde)


def test_a_permissive_serializer_inside_encryption_is_refused() -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    class Cipher:
        def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
            return "rev", plaintext[::-1]

        def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
            return ciphertext[::-1]

    log = s3log.Log(s3log.MemoryStore())
    with pytest.raises(s3log.S3LogError, match="serializer"):
        S3LogSaver(log, serde=EncryptedSerializer(Cipher(), JsonPlusSerializer()))
    # A strict inner serializer is fine, and round-trips.
    saver = S3LogSaver(log, serde=EncryptedSerializer(Cipher(), JsonPlusSerializer(allowed_msgpack_modules=None)))
    app = one_node_graph(saver)
    cfg = {"configurable": {"thread_id": "enc"}}
    app.invoke({"steps": ["x"]}, cfg)
    assert app.get_state(cfg).values["steps"] == ["x", "a"]


@pytest.mark.parametrize("bad", [["mod"], [("mod", "")], [("mod", 1)], ["mod.Name"], [42]])
def test_bad_allowed_types_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="allowed_types"):
        S3LogSaver(s3log.Log(s3log.MemoryStore()), allowed_types=bad)


