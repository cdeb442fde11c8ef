#!/usr/bin/env bash
# The loop's own launch-option search at concurrency 8 on one H200 (glm5 preset): `perfloop run
# examples/targets/mla_server_glm5_serving.toml --proposer search`, every trial judged against the
# reference by the decision rule over `[workload]` windows (output throughput), within its budget
# of minutes and launches; the counterpart of search_vs_grid_h200.sh, whose comparison has no rule.
# Set-up as in gpu_loop_h200.sh (benchmarks/h200_env.sh; .whl/ also needs optuna, colorlog, tqdm).
# Writes search-serving.log, -show.txt and -session.json.gz (the export, for `perfloop replay`) to $OUT.
set -uo pipefail
source benchmarks/h200_env.sh
export PERFLOOP_HOME=/tmp/plh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
rm -rf /tmp/mla_server && cp -r examples/targets/mla_server /tmp/mla_server
(cd /tmp/mla_server && git init -q && git add -A && git -c user.name=perfloop -c user.email=perfloop@localhost commit -qm "mla_server")
timeout 540 python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" \
  run examples/targets/mla_server_glm5_serving.toml --proposer search --max-iterations 8 --approve auto --json "$@" \
  >"$OUT/search-serving.log" 2>&1
echo "run exit $?"
sid=$(ls -t /tmp/plh/sessions | head -1)
perfloop show "$sid" >"$OUT/search-serving-show.txt" 2>&1
perfloop export "$sid" -o "$OUT/search-serving-session.json.gz"
tail -30 "$OUT/search-serving-show.txt"
