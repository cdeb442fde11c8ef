"""The gain model held out (issue 42): on H200 traces of the glm5 demo, each fix is predicted with
the profiler's host inflation fitted on the other launches only, and lands within 25% of what it
realized; `diagnose` prints a range over the step windows that covers the realized figure."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from playbooks.heldout import WITHIN, CorpusTrace, leave_one_out
from playbooks.predict import predict_step_us
from playbooks.spread import DEVICE_INFLATION, HOST_INFLATION, deprofiled, fit_inflation, fitted_for, windows
from tools.trace import read_profiles

GAIN = Path(__file__).resolve().parents[1] / "data" / "traces" / "gain"
CORPUS = [CorpusTrace.model_validate(r) for r in json.loads((GAIN / "corpus.json").read_text())]
LAUNCH = "launch-bound-decode"
NEW = "h200-2026-12-02-call"
EXPLAINED: dict[tuple[str, str], str] = {}
"""Rows allowed outside 25%, each with why (benchmarks/README.md, "The gain model held out")."""


def test_the_committed_traces_read_as_the_corpus_says() -> None:
    committed = [t for t in CORPUS if t.trace_file]
    assert len({t.origin for t in committed}) >= 3
    for t in committed:
        assert t.trace_file is not None
        b = read_profiles([GAIN / t.trace_file]).step_bounds
        assert b is not None and len(b.per_window) == len(t.bounds.per_window) >= 2
        assert b.issue_us == pytest.approx(t.bounds.issue_us) and b.device_us == pytest.approx(
            t.bounds.device_us
        )


def test_the_shipped_inflations_are_the_corpus_fit() -> None:
    pairs = [(t.bounds, t.tpot_ms * 1000) for t in CORPUS]
    assert fit_inflation(pairs, "host launch") == HOST_INFLATION
    assert fit_inflation(pairs, "device") == DEVICE_INFLATION


def test_every_fix_held_out_is_within_25_percent_or_explained() -> None:
    rows = leave_one_out(CORPUS)
    assert len(rows) >= 20 and {r.playbook for r in rows} == {LAUNCH, "kv-cache-full-pool-cast"}
    for r in rows:
        assert r.within or (r.id, r.playbook) in EXPLAINED, (r.id, r.playbook, r.error)
    # The profiled step as it is (the model before this check) misses most launch fixes by far.
    raw_misses = [
        r for r in rows if r.playbook == LAUNCH and abs(r.raw_speedup / r.realized_speedup - 1) > WITHIN
    ]
    assert len(raw_misses) >= len([r for r in rows if r.playbook == LAUNCH]) // 2


def test_cuda_graphs_on_new_eager_cast_traces_held_out_and_covered() -> None:
    """The must-show: at least three traces from different device calls."""
    rows = [
        r
        for r in leave_one_out(CORPUS)
        if r.id.startswith(NEW) and "/cast-eager-" in r.id and r.playbook == LAUNCH
    ]
    assert len({r.id.split("/")[0] for r in rows}) >= 3
    for r in rows:
        assert r.within and r.covered, r


def test_no_window_beats_its_step_over_device_busy_nor_goes_below_the_device_time_kept() -> None:
    for t in CORPUS:
        for playbook, effect in t.effects.items():
            for w in windows(t.bounds):
                for k in (fitted_for(t.bounds).low, fitted_for(t.bounds).high):
                    s = deprofiled(w, k)
                    after = predict_step_us(s, [effect])
                    assert (
                        predict_step_us(s, []) / after
                        <= s.wall_us / max(s.device_us - effect.device_removed_us, 1e-3) + 1e-9
                    )
                    assert after >= s.device_us - effect.device_removed_us - 1e-6, (t.id, playbook)


@pytest.mark.parametrize("trace", [t for t in CORPUS if t.trace_file], ids=lambda t: t.id)
def test_diagnose_prints_the_range_and_it_covers_what_graphs_realized(trace: CorpusTrace) -> None:
    path = str(GAIN / trace.trace_file)  # type: ignore[operator]
    args = ["diagnose", path, "--target-kind", "mla_server", "--active-tokens", "79"]
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    launch = next(f for f in doc["findings"] if f["playbook"] == LAUNCH)
    realized = trace.realized[LAUNCH]
    assert launch["predicted_speedup_low"] <= realized <= launch["predicted_speedup_high"]
    assert abs(launch["predicted_speedup"] / realized - 1) <= WITHIN
    assert "no TPOT given: host terms divided by the profiler's inflation" in launch["basis"]
    text = CliRunner().invoke(app, args, env={"COLUMNS": "300"}).stdout
    block = rf"\d+\. {LAUNCH} \(.*?\((\d+\.\d\d)x, (\d+\.\d\d)-(\d+\.\d\d)x over the step windows\)"
    shown = re.search(block, text, re.DOTALL)
    assert shown is not None
    assert float(shown[2]) == pytest.approx(launch["predicted_speedup_low"], abs=0.006)
    # With the served TPOT, the range is over the windows alone, and still holds the prediction.
    with_tpot = json.loads(CliRunner().invoke(app, [*args, "--tpot-ms", str(trace.tpot_ms), "--json"]).stdout)
    f = next(f for f in with_tpot["findings"] if f["playbook"] == LAUNCH)
    assert f["predicted_speedup_low"] <= f["predicted_speedup"] <= f["predicted_speedup_high"]
    assert abs(f["predicted_speedup"] / realized - 1) <= WITHIN
