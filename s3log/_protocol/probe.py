"""The precondition probe, sans-IO: does the store honour conditional writes and deletes.

:func:`probe_preconditions` sends the requests commits and deletes rely on (create-only
and If-Match PUTs, racing, and If-Match DELETEs) under :data:`PROBE_DIR`, a folder no
session id can name, and reports what the store did (docs/decisions/0012, 0034).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from s3log._format.cbor import dumps
from s3log._format.layout import Layout
from s3log._protocol import decide, ops
from s3log._protocol.ops import Blob, DeleteIfMatch, Get, Op, Proc, PutIfAbsent, PutIfMatch
from s3log.config import LogConfig
from s3log.errors import ConditionalDeleteUnsupported
from s3log.results import ProbeReport, ProbeSeen

#: A folder no session id can name (ids start with a letter or digit): listings and gc skip it.
PROBE_DIR = "_probe/"


#: Requests each race of the probe sends at once: create-only PUTs of one new key, then
#: ``If-Match`` PUTs of it on one ETag (docs/decisions/0034).
PROBE_RACERS = 4


def probe_preconditions(layout: Layout, cfg: LogConfig) -> Proc[ProbeReport]:
    """Check that the store honours what commits and deletes rely on (docs/decisions/0012, 0034).

    With ``N`` = :data:`PROBE_RACERS` (4), an honest store and no fault: ``2N + 4`` = 12
    PUTs and 2 DELETEs in three round trips, nothing else:

    1. a create-only PUT of ``{P}/sessions/_probe/head`` (must meet 412), an ``If-Match``
       PUT of ``{P}/sessions/_probe/missing`` with an ETag no object has (404 or 412),
       ``N`` concurrent create-only PUTs of a new key ``{P}/sessions/_probe/race/{id}``
       (``id`` from ``cfg.env``: exactly one must succeed), and a create-only PUT of
       ``{P}/sessions/_probe/race/{id}.del``;
    2. ``N`` concurrent ``If-Match`` PUTs of the race key on the winner's ETag (exactly
       one must succeed), and a DELETE of ``{id}.del`` with ``If-Match`` on the ETag its
       PUT got (must delete it);
    3. an ``If-Match`` PUT and an ``If-Match`` DELETE of the race key on that first
       ETag, stale now (neither may write or delete).

    The first probe of a bucket creates ``_probe/head`` in its first round trip and sends
    that PUT again in the second: 13 PUTs. A single PUT that met a transient error is sent again in
    the next round, and then after a backoff, up to ``cfg.retry.attempts`` rounds in all;
    a race and each other request are sent once. When a race of creates shows no single
    winner, one GET of the race key finds the ETag the ``If-Match`` race starts from.
    On a store that cannot make a DELETE conditional (ConditionalDeleteUnsupported,
    nothing sent) ``delete_if_match`` is ``"unsupported"``. Each probe leaves its race
    key (one object of about 30 bytes) under ``_probe/race/``, which listings and gc
    skip (and ``{id}.del`` where the DELETE was not possible).
    """
    base = layout.sessions_prefix + PROBE_DIR
    singles = _ProbeSingles(base + "head", base + "missing", dumps({"v": 1, "probe": "s3log"}))
    race_key = f"{base}race/{cfg.env.new_id()}"
    doomed = race_key + ".del"
    creates = [PutIfAbsent(race_key, _race_body(0, i)) for i in range(PROBE_RACERS)]
    results = yield from singles.round([*creates, PutIfAbsent(doomed, _race_body(0, PROBE_RACERS))])
    doomed_etag = results[-1] if isinstance(results[-1], str) else None
    racing_creates, etag, why = _race_outcome(results[:-1], "create-only PUTs of one new key")
    singles.details += why
    if etag is None and racing_creates is not True:
        # No single winner seen (ignored, or replies lost): the ETag the key has now.
        got = yield from ops.parallel([Get(race_key)])
        etag = got[0].etag if isinstance(got[0], Blob) else None
    racing_match: bool | None = None
    stale_match: bool | None = None
    deletes = _ProbeDeletes(race_key, doomed)
    second: list[Op] = []
    if etag is not None:
        second += [PutIfMatch(race_key, _race_body(1, i), etag) for i in range(PROBE_RACERS)]
    if doomed_etag is not None:
        second.append(DeleteIfMatch(doomed, doomed_etag))
    if second:
        results = yield from singles.round(second)
        if doomed_etag is not None:
            deletes.current = results.pop()
    if etag is not None:
        racing_match, won, why = _race_outcome(results, "If-Match PUTs on one ETag")
        singles.details += why
        if won is not None or racing_match is False:
            # The key was rewritten (other bytes, so another ETag): ``etag`` is stale.
            results = yield from singles.round([PutIfMatch(race_key, _race_body(2, 0), etag),
                                                DeleteIfMatch(race_key, etag)])
            stale_match = _stale_outcome(results[0], race_key, singles.details)
            deletes.stale = results[1]
    yield from singles.finish(cfg)
    delete_match = deletes.outcome(singles.details)
    detail = "; ".join(singles.details) or "conditional writes and deletes are honoured"
    return ProbeReport(singles.none_match, singles.match, detail, stale_if_match=stale_match,
                       racing_if_match=racing_match, racing_creates=racing_creates, delete_if_match=delete_match)


_UNSENT = object()


@dataclass
class _ProbeDeletes:
    """The probe's two conditional DELETEs: of ``doomed`` on its current ETag (must
    delete it), of the race key on a stale ETag (must delete nothing)."""

    race_key: str
    doomed: str
    current: object = _UNSENT
    stale: object = _UNSENT

    def outcome(self, details: list[str]) -> ProbeSeen:
        """Honoured, ignored, untested (None) or unsupported, with what was seen in ``details``."""
        if any(isinstance(r, ConditionalDeleteUnsupported) for r in (self.current, self.stale)):
            return "unsupported"
        stale = decide.classify(self.stale) if self.stale is not _UNSENT else None
        current = decide.classify(self.current) if self.current is not _UNSENT else None
        if stale is decide.Reply.OK:
            details.append(f"a DELETE with If-Match on a stale ETag deleted {self.race_key}")
            return False
        if stale is decide.Reply.PRECONDITION and current is decide.Reply.OK:
            return True
        if current is decide.Reply.PRECONDITION:
            # A store that refuses every conditional DELETE deletes nothing it should
            # not: gc, rm and expire would delete nothing; the stale refusal says nothing.
            details.append(f"a DELETE with If-Match on the current ETag was refused ({self.doomed})")
        elif self.current is not _UNSENT and self.stale is not _UNSENT:
            seen = self.stale if current is decide.Reply.OK else self.current
            details.append(f"could not test If-Match on DELETE: {seen}")
        return None


def _race_body(round_no: int, racer: int) -> bytes:
    # Bytes differ per round and racer: each write gives the key another ETag.
    return dumps({"v": 1, "probe": "s3log", "round": round_no, "racer": racer})


def _race_outcome(results: Sequence[object], what: str) -> tuple[bool | None, str | None, list[str]]:
    """(honoured?, the winner's ETag, details) of one race of conditional PUTs."""
    wins = [r for r in results if isinstance(r, str)]
    if len(wins) > 1:
        return False, None, [f"{len(wins)} of {len(results)} racing {what} succeeded"]
    if wins:
        return True, wins[0], []
    seen = sorted({decide.classify(r).name for r in results})
    return None, None, [f"could not test racing {what}: none succeeded ({', '.join(seen)})"]


def _stale_outcome(result: object, key: str, details: list[str]) -> bool | None:
    reply = decide.classify(result)
    if reply in (decide.Reply.PRECONDITION, decide.Reply.NOT_FOUND):
        return True
    if reply is decide.Reply.OK:
        details.append(f"a PUT with If-Match on a stale ETag replaced {key}")
        return False
    details.append(f"could not test If-Match with a stale ETag: {result}")
    return None


@dataclass
class _ProbeSingles:
    """The probe's two single conditional PUTs, sent again in each round until decided."""

    exists_key: str
    missing_key: str
    body: bytes
    none_match: bool | None = None
    match: bool | None = None
    details: list[str] = field(default_factory=list)
    created: bool = False
    decided: set[str] = field(default_factory=set)
    rounds: int = 0

    def _pending(self) -> list[PutIfAbsent | PutIfMatch]:
        out: list[PutIfAbsent | PutIfMatch] = []
        if "none_match" not in self.decided:
            out.append(PutIfAbsent(self.exists_key, self.body))
        if "match" not in self.decided:
            out.append(PutIfMatch(self.missing_key, self.body, '"s3log-probe-no-such-etag"'))
        return out

    def round(self, others: Sequence[Op]) -> Proc[list[Any]]:
        """Send the undecided singles with ``others`` in one round trip; ``others``' results."""
        mine = self._pending()
        self.rounds += 1
        results = yield from ops.parallel([*mine, *others])
        for op, res in zip(mine, results, strict=False):
            self._take(op, res)
        return results[len(mine):]

    def finish(self, cfg: LogConfig) -> Proc[None]:
        """Send the undecided singles again after a backoff, until decided or out of attempts."""
        while self._pending() and self.rounds < cfg.retry.attempts:
            if not (self.created and "none_match" not in self.decided and self.rounds == 1):
                yield from ops.sleep(cfg.retry.backoff(self.rounds, cfg.env.rng))
            yield from self.round([])

    def _take(self, op: Op, res: object) -> None:
        reply = decide.classify(res)
        if isinstance(op, PutIfAbsent):
            if reply is decide.Reply.PRECONDITION:
                self.none_match = True
                self.decided.add("none_match")
            elif reply is decide.Reply.OK:
                if self.created:
                    self.none_match = False
                    self.decided.add("none_match")
                    self.details.append(f"a create-only PUT (If-None-Match: *) replaced {self.exists_key}")
                self.created = True  # first probe of this bucket: PUT it again
            elif reply is decide.Reply.FATAL:
                self.decided.add("none_match")
                self.details.append(f"could not test If-None-Match: {res}")
        elif reply in (decide.Reply.NOT_FOUND, decide.Reply.PRECONDITION):
            self.match = True
            self.decided.add("match")
        elif reply is decide.Reply.OK:
            self.match = False
            self.decided.add("match")
            self.details.append(f"a PUT with If-Match on a missing object created {self.missing_key}")
        elif reply is decide.Reply.FATAL:
            self.decided.add("match")
            self.details.append(f"could not test If-Match: {res}")
