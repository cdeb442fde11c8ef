#!/usr/bin/env bash
# Both serving benchmarks of issue 27 in one 10-minute device call on one H200 (glm5 preset,
# concurrency 8), one after the other so neither shares the GPU with the other:
#   1. benchmarks/search_vs_grid.py: an auto_tune-style grid vs perfloop's TPE search, BUDGET
#      launches each, against the default launch (standalone, no decision rule);
#   2. the loop's own search (search_serving_h200.sh's session) with its minutes and launches cut
#      to fit: every trial judged against the reference by the rule over `[workload]` windows.
# Set-up as gpu_loop_h200.sh (benchmarks/h200_env.sh; .whl/ also holds optuna, colorlog, tqdm).
#   bash benchmarks/serving_h200.sh [BUDGET [MINUTES [LAUNCHES]]]   (defaults 3, 4, 6)
set -uo pipefail
source benchmarks/h200_env.sh
budget=${1:-3} minutes=${2:-4} launches=${3:-6}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t0=$SECONDS
timeout 250 python3 benchmarks/search_vs_grid.py --preset glm5 --device cuda --concurrency 8 \
  --budget "$budget" --windows 3 --max-tokens 32 --out "$OUT" >"$OUT/search_vs_grid.log" 2>&1
echo "search_vs_grid exit $? after $((SECONDS - t0)) s"; tail -6 "$OUT/search_vs_grid.log"
nvidia-smi --query-gpu=memory.used --format=csv,noheader
export PERFLOOP_HOME=/tmp/plh
rm -rf /tmp/mla_server /tmp/plh && cp -r examples/targets/mla_server /tmp/mla_server
(cd /tmp/mla_server && git init -q && git add -A && git -c user.name=perfloop -c user.email=perfloop@localhost commit -qm "mla_server")
sed -e "s/^max_minutes = 6 /max_minutes = $minutes /" -e "s/^max_launches = 9 /max_launches = $launches /" \
  examples/targets/mla_server_glm5_serving.toml >/tmp/serving.toml
grep -E "^max_(minutes|launches)" /tmp/serving.toml
t1=$SECONDS
timeout $((585 - SECONDS)) python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" \
  run /tmp/serving.toml --proposer search --max-iterations 8 --json >"$OUT/search-serving.log" 2>&1
echo "run exit $? after $((SECONDS - t1)) s"
sid=$(ls -t /tmp/plh/sessions | head -1)
perfloop show "$sid" >"$OUT/search-serving-show.txt" 2>&1
perfloop export "$sid" -o "$OUT/search-serving-session.json.gz"
grep -v "^│\|^┃\|^┏\|^┗\|^┡\|^└" "$OUT/search-serving-show.txt" | tail -25
pkill -f mla_server; sleep 1; nvidia-smi --query-gpu=memory.used --format=csv,noheader
