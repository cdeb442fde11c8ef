#!/usr/bin/env bash
# Run `perfloop demo --device cuda --preset glm5` on a bare H200 machine (Python 3.12 + torch, no
# registry): perfloop's pure-Python deps travel as wheels in .whl/, git as Debian packages in
# .gitdeb/ (see benchmarks/README.md). Outputs go to $OUT.
set -uo pipefail
source benchmarks/h200_env.sh
export PERFLOOP_HOME=/tmp/plh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
perfloop demo --device cuda --preset glm5 "$@" --json 2>&1 | tee "$OUT/demo.log"
sid=$(tail -1 "$OUT/demo.log" | python3 -c "import json,sys; print(json.load(sys.stdin)['session'])")
perfloop show "$sid" > "$OUT/show.txt" 2>&1
perfloop export "$sid" -o "$OUT/gpu-demo-session.json.gz"
cp /tmp/plh/sessions/"$sid"/logs/server-1.log "$OUT/server-1.log" 2>/dev/null
tail -5 "$OUT/show.txt"
