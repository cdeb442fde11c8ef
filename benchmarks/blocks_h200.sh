#!/usr/bin/env bash
# Paired blocks' false-accept rate and power on one H200 (issue 45): decisions.py --arms blocks on
# the demo's glm5 geometry cut to 20 layers, on cuda, the rule exactly as the loop applies it
# (agent/decision/stats/blocks.py): no-op sessions (the same tree in both arms) and sessions whose
# reference runs 1 or 2 extra layer passes (a true gain of ~1/20 or ~2/20 of the layers' work, its
# realized size printed as the median speedup). Sessions run 6 at a time (one server at a time
# each), one of each scenario in turn, so a run the deadline cuts stays balanced. Carries
# perfloop's pure-Python deps as wheels (.whl/) and git as Debian packages (.gitdeb/) like
# gpu_demo_h200.sh. Writes blocks-h200.log and blocks-h200.json to $OUT (one device call, < 10 min).
set -uo pipefail
source benchmarks/h200_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc; uptime
timeout 540 python3 benchmarks/decisions.py --arms blocks --preset glm5 --device cuda \
  --server-args "--layers 20" --calibration 4 --aa-pairs 20 --detect-layers 1:20 --detect-layers 2:20 \
  --repeats 3 --looks 1 --max-tokens 16 --workers 6 --round-robin --deadline-s 480 \
  --out "$OUT/blocks-h200.json" "$@" >"$OUT/blocks-h200.log" 2>&1
echo "exit $?"; grep -v Warn "$OUT/blocks-h200.log" | tail -14; uptime
