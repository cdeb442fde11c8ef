#!/usr/bin/env bash
# The schedule-aware output gate on one GPU (issue "Outputs judged as the engine's numerics allow"):
# `bash benchmarks/gate_gpu.sh PART...`, set-up as in gpu_demo_h200.sh (.whl/ and .gitdeb/ carried,
# benchmarks/h200_env.sh). The parts run in order; each writes its logs to $OUT and stops every
# server it started; `DEADLINE_S` (default 560) skips a demo session that could not end before it.
#   bench     benchmarks/schedule_gate.py: 20 correctness sets against exact and planted changes,
#             every server at once on the GPU (glm5 geometry at 32 layers, the fusion playbook too)
#   demo:N    N sessions of `perfloop demo --device cuda --preset glm5` in one fresh PERFLOOP_HOME
#             (the first calibrates the host; the later ones reuse its launch noise, as a user's do)
#   search    `perfloop run examples/targets/mla_server_glm5_serving.toml --proposer search` from a
#             fresh PERFLOOP_HOME, the example's own budget
set -uo pipefail
source benchmarks/h200_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
export DEADLINE_S=${DEADLINE_S:-560}
L=/tmp/gate-logs; rm -rf $L; mkdir -p $L  # every log, packed into one file of $OUT at the end
for part in "$@"; do
case "$part" in
bench)
  timeout 300 python3 benchmarks/schedule_gate.py --device cuda --preset glm5 --layers ${LAYERS:-16} --sets ${SETS:-20} \
    --max-tokens 24 --fusion --out "$L/schedule-gate.json" 2>&1 | tee "$L/schedule-gate.log"
  ;;
demo:*)
  export PERFLOOP_HOME=/tmp/plh-demo
  done_before=$(ls $PERFLOOP_HOME/sessions 2>/dev/null | wc -l)
  for i in $(seq $((done_before + 1)) $((done_before + ${part#demo:}))); do
    if [ $((SECONDS + 240)) -gt "$DEADLINE_S" ]; then echo "demo $i: skipped (deadline)"; break; fi
    start=$(date +%s)
    timeout $((DEADLINE_S - SECONDS)) python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" \
      demo --device cuda --preset glm5 --json >"$L/demo-$i.json" 2>"$L/demo-$i.err"
    echo "demo $i: exit $? in $(( $(date +%s) - start )) s"
    sid=$(ls -t $PERFLOOP_HOME/sessions | head -1)
    perfloop show "$sid" >"$L/demo-$i-show.txt" 2>&1
    grep -E "speedup|decision|outputs|output gate|accepted|rejected" "$L/demo-$i-show.txt" | head -12
  done
  perfloop export "$sid" -o "$L/demo-$i-session.json.gz" 2>/dev/null
  ;;
search)
  export PERFLOOP_HOME=/tmp/plh-search
  rm -rf /tmp/mla_server && cp -r examples/targets/mla_server /tmp/mla_server
  (cd /tmp/mla_server && git init -q && git add -A && git -c user.name=perfloop -c user.email=perfloop@localhost commit -qm "mla_server")
  start=$(date +%s)
  timeout "$DEADLINE_S" python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" \
    run examples/targets/mla_server_glm5_serving.toml --proposer search --approve auto --json \
    >"$L/search.json" 2>"$L/search.err"
  echo "search: exit $? in $(( $(date +%s) - start )) s"
  sid=$(ls -t $PERFLOOP_HOME/sessions | head -1)
  perfloop show "$sid" >"$L/search-show.txt" 2>&1
  perfloop export "$sid" -o "$L/search-session.json.gz"
  tail -40 "$L/search-show.txt"
  ;;
esac
pkill -f -- "-m [m]la_server[.]server" 2>/dev/null  # the servers only, not a shell that names them
done
tar czf "$OUT/gate-logs-$(date +%H%M%S).tar.gz" -C $L .
exit 0
