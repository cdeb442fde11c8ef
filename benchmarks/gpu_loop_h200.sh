#!/usr/bin/env bash
# The loop on one H200 as its own local host: `perfloop demo --device cuda --preset glm5` with demo
# options (e.g. --server-args=--disable-cuda-graph). Carries perfloop's pure-Python deps as wheels
# (.whl/) and git as a Debian package (.gitdeb/) like gpu_demo_h200.sh. Writes NAME.log,
# NAME-show.txt, NAME-session.json.gz (the export) and NAME-findings.json to $OUT.
# Usage: bash benchmarks/gpu_loop_h200.sh NAME SECONDS [demo options]
set -uo pipefail
name=$1 limit=$2
shift 2
source benchmarks/h200_env.sh
export PERFLOOP_HOME=/tmp/plh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout "$limit" python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" \
  demo --device cuda --preset glm5 "$@" --json >"$OUT/$name.log" 2>&1
echo "demo exit $?"
sid=$(python3 -c "
import json, sys
for line in reversed(open(sys.argv[1]).read().splitlines()):
    if line.startswith('{'):
        print(json.loads(line)['session']); break
" "$OUT/$name.log")
[ -n "$sid" ] || sid=$(ls -t /tmp/plh/sessions | head -1)
perfloop show "$sid" >"$OUT/$name-show.txt" 2>&1
perfloop export "$sid" -o "$OUT/$name-session.json.gz"
# Each profile's findings as the loop saw them (predicted vs bound), for the benchmarks table.
python3 - "$sid" >"$OUT/$name-findings.json" <<'PY'
import json, sys
from agent.sessions.runner import Sessions
from playbooks.engine import diagnose, load_playbooks
from state.profiling.diagnosis import DiagnosisContext
from tools.trace import read_profiles
state = Sessions().state(sys.argv[1])
out = []
for p in state.profiles:
    prof = read_profiles([p.trace_path])
    d = diagnose(prof, DiagnosisContext(target_kind="mla_server", active_tokens=p.active_tokens), load_playbooks())
    out.append({"iteration": p.iteration, "bounds": prof.step_bounds.model_dump() if prof.step_bounds else None,
                "findings": [f.model_dump(include={"playbook", "step_ms", "predicted_step_ms", "predicted_speedup",
                                                   "bound", "bound_after", "paired_with", "paired_speedup", "confidence"})
                             for f in d.findings]})
print(json.dumps({"session": sys.argv[1], "launch_argv": state.launch_argv, "profiles": out,
                  "decisions": [d.model_dump(mode="json") for d in state.decisions]}, indent=1))
PY
tail -25 "$OUT/$name-show.txt"
