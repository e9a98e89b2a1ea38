"""The latency model of scripts/latency_proxy.py: log-normals fitted to a published band,
drawn from seeded generators so that a benchmark run draws the same delays again."""

from __future__ import annotations

import statistics
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parent.parent


def _proxy() -> ModuleType:
    return load_script("latency_proxy")


def test_the_models_are_fitted_to_their_bands() -> None:
    lp = _proxy()
    for model in lp.MODELS.values():
        assert model.quantile_ms(0.5) == pytest.approx(model.p50_ms)
        assert model.quantile_ms(0.99) == pytest.approx(model.p99_ms)
    assert (lp.MODELS["standard"].p50_ms, lp.MODELS["standard"].p99_ms) == (50.0, 100.0)
    assert (lp.MODELS["express"].p50_ms, lp.MODELS["express"].p99_ms) == (5.0, 10.0)
    with pytest.raises(ValueError, match="p50_ms <= p99_ms"):
        lp.LatencyModel("bad", 10.0, 5.0)


def test_draws_are_seeded_and_follow_the_band() -> None:
    lp = _proxy()
    model = lp.MODELS["express"]
    one = lp.Delays(model=model, seed=7)
    two = lp.Delays(model=model, seed=7)
    draws = [one.next_ms("/b/k") for _ in range(20_000)]
    assert draws == [two.next_ms("/b/k") for _ in range(20_000)]  # the same seed, the same delays
    assert draws != [lp.Delays(model=model, seed=8).next_ms("/b/k") for _ in range(20_000)]
    assert all(d > 0 for d in draws)
    q = statistics.quantiles(draws, n=100)
    assert q[49] == pytest.approx(5.0, rel=0.03) and q[98] == pytest.approx(10.0, rel=0.08)
    one.reset()
    assert [one.next_ms("/b/k") for _ in range(5)] == draws[:5]


def test_side_requests_draw_from_their_own_sequence() -> None:
    """A segment PUT between two head PUTs does not shift the heads' delays: the bench
    compares a commit's head PUT with a raw PUT draw for draw."""
    lp = _proxy()
    plain = lp.Delays(model=lp.MODELS["standard"], seed=3, side_pattern="/seg/")
    mixed = lp.Delays(model=lp.MODELS["standard"], seed=3, side_pattern="/seg/")
    heads = [plain.next_ms("/b/raw/1") for _ in range(10)]
    mixed_heads = []
    for i in range(10):
        mixed_heads.append(mixed.next_ms("/b/s3log/sessions/x/head"))
        if i % 3 == 0:
            mixed.next_ms("/b/s3log/sessions/x/seg/000000000000-ab.cbor")
    assert mixed_heads == heads


def test_a_fixed_delay_draws_nothing() -> None:
    lp = _proxy()
    d = lp.Delays(30.0)
    assert [d.next_ms("/x") for _ in range(3)] == [30.0, 30.0, 30.0]
    with pytest.raises(ValueError, match="at least 0"):
        lp.Delays(-1.0)
