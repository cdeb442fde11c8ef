#!/usr/bin/env bash
# Issue 61's first GPU call (one H100 or H200, under 10 minutes): the numerics gate's benchmark
# (benchmarks/numerics_gate_gpu.sh: benign math changes and planted bugs judged against the engine's
# own batch schedules on the GPU), then one `perfloop demo --device cuda --preset glm5` session in a
# fresh PERFLOOP_HOME (benchmarks/gate_gpu.sh demo:1: the cast fix judged by the numerics gate, the
# default output policy). Carries .whl/ and .gitdeb/ (benchmarks/h200_env.sh):
#   run(command="bash benchmarks/numerics_gpu.sh", carry=[".whl", ".gitdeb"])
# BENCH_S and DEMO_S cut each part; every server a part started is stopped by the part.
set -uo pipefail
OUT=${OUT:-/tmp/numerics-gpu-out}; mkdir -p "$OUT"; export OUT
DEADLINE_S=${BENCH_S:-230} bash benchmarks/numerics_gate_gpu.sh "$@"
DEADLINE_S=${DEMO_S:-330} bash benchmarks/gate_gpu.sh demo:1
pkill -f -- "-m [m]la_server[.]server" 2>/dev/null  # the servers only, not a shell that names them
python3 - "$OUT/numerics-gate.json" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))["summary"]
except (OSError, ValueError, KeyError) as exc:
    sys.exit(f"benchmark: no summary ({exc})")
print("benchmark summary:", json.dumps(s)[:1500])
PY
exit 0
