#!/usr/bin/env bash
# The schedule-aware output gate on one GPU (issue "Outputs judged as the engine's numerics allow"):
# `bash benchmarks/gate_gpu.sh PART [N]`, set-up as in gpu_demo_h200.sh (.whl/ and .gitdeb/ carried,
# benchmarks/h200_env.sh). Each part writes its logs to $OUT and stops every server it started.
#   bench     benchmarks/schedule_gate.py: 20 correctness sets against exact and planted changes,
#             every server at once on the GPU (glm5 geometry at 32 layers, the fusion playbook too)
#   demo N    N sessions of `perfloop demo --device cuda --preset glm5` in one fresh PERFLOOP_HOME
#             (the first calibrates the host; the later ones reuse its launch noise, as a user's do)
#   search    `perfloop run examples/targets/mla_server_glm5_serving.toml --proposer search` from a
#             fresh PERFLOOP_HOME, the example's own budget
set -uo pipefail
source benchmarks/h200_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
part=${1:?bench, demo N or search}
case "$part" in
bench)
  timeout 420 python3 benchmarks/schedule_gate.py --device cuda --preset glm5 --layers 32 --sets 20 \
    --fusion --out "$OUT/schedule-gate.json" 2>&1 | tee "$OUT/schedule-gate.log"
  ;;
demo)
  export PERFLOOP_HOME=/tmp/plh-demo
  for i in $(seq 1 "${2:-1}"); do
    start=$(date +%s)
    timeout 420 python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" \
      demo --device cuda --preset glm5 --json >"$OUT/demo-$i.json" 2>"$OUT/demo-$i.err"
    echo "demo $i: exit $? in $(( $(date +%s) - start )) s"
    sid=$(ls -t $PERFLOOP_HOME/sessions | head -1)
    perfloop show "$sid" >"$OUT/demo-$i-show.txt" 2>&1
    grep -E "speedup|decision|outputs|output gate|accepted|rejected" "$OUT/demo-$i-show.txt" | head -12
  done
  perfloop export "$sid" -o "$OUT/demo-last-session.json.gz"
  ;;
search)
  export PERFLOOP_HOME=/tmp/plh-search
  rm -rf /tmp/mla_server && cp -r examples/targets/mla_server /tmp/mla_server
  (cd /tmp/mla_server && git init -q && git add -A && git -c user.name=perfloop -c user.email=perfloop@localhost commit -qm "mla_server")
  start=$(date +%s)
  timeout 560 python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" \
    run examples/targets/mla_server_glm5_serving.toml --proposer search --approve auto --json \
    >"$OUT/search.json" 2>"$OUT/search.err"
  echo "search: exit $? in $(( $(date +%s) - start )) s"
  sid=$(ls -t $PERFLOOP_HOME/sessions | head -1)
  perfloop show "$sid" >"$OUT/search-show.txt" 2>&1
  perfloop export "$sid" -o "$OUT/search-session.json.gz"
  tail -40 "$OUT/search-show.txt"
  ;;
esac
pkill -f "mla_server" 2>/dev/null
exit 0
