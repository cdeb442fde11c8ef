"""The numerics gate's benchmark (benchmarks/numerics_gate.py) on the demo's real model, in-process,
one layer: the teacher-forced machinery, the measured effect of a planted bug and the gate's
verdicts on two benign changes and two bugs of 20%."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import numerics_gate  # noqa: E402


def test_two_benign_changes_and_two_bugs_of_20_percent(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    a = numerics_gate.parse(
        ["--layers", "1", "--prompts", "4", "--tokens", "12", "--pool", "512", "--json", str(out),
         "--only", "cast fix,attention in float32,KV dequant scale +20%,o_proj output scale +20%"]
    )  # fmt: skip
    result = numerics_gate.bench(a)
    rows = {r["name"]: r for r in result["rows"]}
    assert sorted(rows) == [
        "KV dequant scale +20%",
        "attention in float32",
        "cast fix (gather, then cast the rows)",
        "o_proj output scale +20%",
    ]
    # the cast fix changes no number: the same greedy texts, every logprob equal
    fix = rows["cast fix (gather, then cast the rows)"]
    assert fix["verdict"] == "exact" and fix["max_dlogprob"] == 0.0
    # float32 attention moves the logprobs (it is not the baseline's rounding) but less than the
    # baseline's own distance from its math computed in float32 (the precision reference): within
    f32 = rows["attention in float32"]
    assert 0 < f32["max_dlogprob"] < 0.1
    assert f32["verdict"] != "beyond", f32["line"]
    # each bug's effect is measured where it acts: the scale error itself; both are refused
    for name in ("KV dequant scale +20%", "o_proj output scale +20%"):
        bug = rows[name]
        assert abs(bug["effect_pct"] - 20) < 0.5, bug
        assert bug["verdict"] == "beyond", bug["line"]
        assert bug["mean_dlogprob"] > 5 * f32["mean_dlogprob"]
    s = result["summary"]
    assert (s["bugs_refused"], s["bugs"], s["big_refused"], s["big"]) == (2, 2, 2, 2)
    assert out.exists() and '"summary"' in out.read_text()
