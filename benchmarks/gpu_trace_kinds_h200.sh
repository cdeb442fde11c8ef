#!/usr/bin/env bash
# Traces of every kind on one H200, and the loop with the API profile method (issue 25), in one
# device call (~8 minutes). Carries perfloop's pure-Python deps as wheels (.whl/) and git as Debian
# packages (.gitdeb/) like gpu_loop_h200.sh. Writes to $OUT:
#   corpus/h200-{eager,graphs}-{hook,api,bare}.json.gz  real traces of the demo server, glm5 geometry
#     with 6 layers (small enough for tests/data), by perfloop's hook, /start_profile and a bare
#     `with profile():`; corpus/expected-h200.json what tests/unit/test_trace_windows.py expects of
#     them (copy both into tests/data/traces/served/ to commit them);
#   api-eager.log, api-eager-show.txt, api-eager-session.json.gz  `perfloop demo --device cuda --preset
#     glm5 --profile-method api --server-args=--disable-cuda-graph --max-iterations 2`;
#   api-eager-served.json.gz  that session's first (served, API-method, eager, 78-layer) trace;
#   api-eager-findings.json, table.md  each profile's bounds and findings (alone, paired, basis) with
#     the session's TPOT, against what each decision realized.
# Usage: bash benchmarks/gpu_trace_kinds_h200.sh
set -uo pipefail
t0=$(date +%s)
source benchmarks/h200_env.sh
export PERFLOOP_HOME=/tmp/plh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
mkdir -p "$OUT/corpus"

# 1. The corpus: eager and CUDA-graph decode, each by the hook, the API and no marker.
small=(--preset glm5 --device cuda --layers 6)
timeout 150 python3 tests/data/traces/make_served_traces.py "$OUT/corpus" h200-eager "${small[@]}" --disable-cuda-graph \
  >"$OUT/corpus/eager.log" 2>&1; echo "corpus eager exit $? at $(($(date +%s) - t0)) s"
timeout 150 python3 tests/data/traces/make_served_traces.py "$OUT/corpus" h200-graphs "${small[@]}" \
  >"$OUT/corpus/graphs.log" 2>&1; echo "corpus graphs exit $? at $(($(date +%s) - t0)) s"
python3 - "$OUT/corpus" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
active = [json.loads(l)["active_tokens"] for l in (out / "eager.log").read_text().splitlines() if l.startswith("{") and "active_tokens" in l]
traces = []
for mode, bound, top in (("eager", "host launch", "launch-bound-decode"), ("graphs", "device", "kv-cache-full-pool-cast")):
    for how, source, steps in (("hook", "ProfilerStep", 5), ("api", "forward_decode", 5), ("bare", "inferred from the kernel pattern", 5)):
        t = {"file": f"h200-{mode}-{how}.json.gz", "method": how, "step_source": source, "steps": steps, "bound": bound}
        if mode == "eager":
            t |= {"max_cast_alone": 1.3, "max_launch_alone": None}
        else:
            t["top_finding"] = top
        traces.append({k: v for k, v in t.items() if v is not None})
doc = {"recorded": "one H200, torch 2.11, the demo server's glm5 geometry with 6 layers (--preset glm5 --device cuda --layers 6): benchmarks/gpu_trace_kinds_h200.sh",
       "active_tokens": active[0] if active else 79, "target_kind": "mla_server", "traces": traces}
(out / "expected-h200.json").write_text(json.dumps(doc, indent=1))
PY
for f in "$OUT"/corpus/h200-*.json.gz; do
  perfloop diagnose "$f" --target-kind mla_server --active-tokens 79 2>&1 | head -12 >"${f%.json.gz}.diagnose.txt"
done

# 2. The loop with the API profile method from an eager launch (the path an SGLang user takes).
left=$((500 - ($(date +%s) - t0)))
echo "demo budget ${left} s"
timeout "$left" python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" \
  demo --device cuda --preset glm5 --profile-method api --server-args=--disable-cuda-graph --max-iterations 2 --json \
  >"$OUT/api-eager.log" 2>&1
echo "demo exit $? at $(($(date +%s) - t0)) s"
sid=$(ls -t /tmp/plh/sessions | head -1)
perfloop show "$sid" >"$OUT/api-eager-show.txt" 2>&1
perfloop export "$sid" -o "$OUT/api-eager-session.json.gz"
python3 - "$sid" "$OUT" <<'PY'
import json, shutil, sys
from pathlib import Path
from agent.sessions.runner import Sessions
from playbooks.engine import diagnose, load_playbooks
from state.profiling.diagnosis import DiagnosisContext
from tools.trace import read_profiles
state, out = Sessions().state(sys.argv[1]), Path(sys.argv[2])
keep = ("playbook", "step_ms", "predicted_step_ms", "predicted_speedup", "bound", "bound_after", "paired_with", "paired_speedup", "basis")
profiles = []
for n, p in enumerate(state.profiles):
    if n == 0:
        shutil.copy(p.trace_path, out / "api-eager-served.json.gz")
    prof = read_profiles([p.trace_path])
    before = next((d.tpot_ms_before for d in state.decisions if d.iteration == p.iteration), None)
    ctx = DiagnosisContext(target_kind="mla_server", active_tokens=p.active_tokens, tpot_ms=before)
    d = diagnose(prof, ctx, load_playbooks())
    profiles.append({"iteration": p.iteration, "tpot_ms": before, "step_source": prof.step_source,
                     "bounds": prof.step_bounds.model_dump() if prof.step_bounds else None,
                     "findings": [f.model_dump(include=set(keep)) for f in d.findings]})
decisions = [{"iteration": d.iteration, "playbook": d.source, "verdict": d.verdict, "predicted": d.predicted_speedup,
              "tpot_before": d.tpot_ms_before, "tpot_after": d.tpot_ms_after,
              "realized": d.tpot_ms_before / d.tpot_ms_after if d.tpot_ms_before and d.tpot_ms_after else None}
             for d in state.decisions]
(out / "api-eager-findings.json").write_text(json.dumps({"session": sys.argv[1], "profiles": profiles, "decisions": decisions}, indent=1))
lines = ["| iteration | profile | bound | finding | predicted alone | paired | realized | verdict |", "|---|---|---|---|---|---|---|---|"]
for p in profiles:
    b = p["bounds"]
    for f in p["findings"]:
        dec = next((d for d in decisions if d["iteration"] == p["iteration"] and d["playbook"] == f["playbook"]), None)
        alone = f"{f['predicted_speedup']:.2f}x" if f["predicted_speedup"] else "unknown"
        pair = f"{f['paired_speedup']:.2f}x with {f['paired_with']}" if f["paired_with"] else ""
        real = f"{dec['realized']:.2f}x" if dec and dec["realized"] else ""
        lines.append(f"| {p['iteration']} | {p['step_source']} | {b['bound'] if b else 'unknown'} | {f['playbook']} | {alone} | {pair} | {real} | {dec['verdict'] if dec else ''} |")
first, last = (decisions[0]["tpot_before"], decisions[-1]["tpot_after"]) if decisions else (None, None)
accepted = [d for d in decisions if d["verdict"] == "accepted"]
end = accepted[-1]["tpot_after"] if accepted else first
lines.append("")
lines.append(f"session: {first} -> {end} ms TPOT ({first / end:.2f}x)" if first and end else "session: no decision")
(out / "table.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
tail -20 "$OUT/api-eager-show.txt"
echo "total $(($(date +%s) - t0)) s"
