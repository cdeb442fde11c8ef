"""Output noise published per host and engine (issue 55): each baseline's A/A on outputs is kept
in the session store under its engine, host and model (`outputs.noise_record`, through the door),
and a baseline's plan line states what every baseline of that host and engine showed, pooled
within one batch-invariant mode."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.cli.target import load_target
from agent.decision.gate.outputs import published
from agent.decision.stats.noise import outputs_key
from state.measurement.correctness import OutputNoise, OutputNoiseArgs, OutputNoiseSample
from tests.unit.test_target import DEMO_TOML
from tools.store import aa


class Door:
    """Runs each tool for real (the store under $PERFLOOP_HOME), recording the calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def call(self, fn, args):
        self.calls.append(type(args).__name__)
        return fn(args)


def sample(
    session: str, observations: int, varied: int, mode: str | None = None, key: str = "k"
) -> OutputNoiseSample:
    return OutputNoiseSample(
        key=key, session_id=session, observations=observations, varied=varied, deterministic_mode=mode
    )


def test_the_store_keeps_one_sample_a_session_per_key_oldest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path / "home"))
    aa.record_output_noise(OutputNoiseArgs(sample=sample("s1", 12, 1)))
    aa.record_output_noise(OutputNoiseArgs(sample=sample("s2", 12, 3, key="other")))
    aa.record_output_noise(OutputNoiseArgs(sample=sample("s3", 12, 0)))
    kept = aa.record_output_noise(OutputNoiseArgs(sample=sample("s1", 12, 2))).samples  # s1 again: replaced
    assert [(s.session_id, s.varied) for s in kept] == [("s3", 0), ("s1", 2)]


def test_a_baseline_states_its_host_and_engines_baselines_pooled_within_its_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path / "home"))
    target = load_target(DEMO_TOML)
    key = outputs_key(target)
    assert key.startswith("outputs:mla_server@local#") and key == outputs_key(
        target.model_copy(update={"name": "x"})
    )
    assert outputs_key(target.model_copy(update={"model": "another"})) != key
    aa.record_output_noise(OutputNoiseArgs(sample=sample("earlier", 12, 2, key=key)))
    aa.record_output_noise(
        OutputNoiseArgs(sample=sample("det", 12, 0, "--enable-deterministic-inference", key))
    )
    door = Door()
    state = SimpleNamespace(target=target, session_id="now")
    noise = OutputNoise(observations=12, varied=1, first_divergence=30, agreement=0.99)
    out = published(state, SimpleNamespace(context=SimpleNamespace(door=door)), noise)  # type: ignore[arg-type]
    assert door.calls == ["OutputNoiseArgs"]  # one call through the door: a replay reads the same
    assert (out.host_observations, out.host_varied, out.host_sessions) == (24, 3, 2)  # not the other mode's
    assert out.line().endswith("; this host and engine: 3/24 batched texts moved over 2 baselines (12%)"), (
        out.line()
    )
    assert out.plan() == noise.line()  # nothing published before: the plan alone
    assert out.varied == 1 and out.observations == 12  # the rule still reads this session's own
