#!/usr/bin/env bash
# Issue 24's benchmark on one H200 in one device call: how often the decision rule keeps a true
# ~1.05x change and a no-op, with interleaved arms and with alternating relaunches, the two run side
# by side on the one GPU (benchmarks/decisions.py, real launches of the demo server under CUDA
# graphs, perfloop's client and rule). A smaller geometry of the glm5 preset (40 layers, a
# 32,768-slot pool) so that ten servers fit at once; the true change is 2 extra layer passes per
# decode step (BENCH_EXTRA_LAYERS, ~2/40 more layer work, outputs unchanged), given to the
# reference arm, so the candidate is the faster tree. Each writes its log and JSON to $OUT.
#   bash benchmarks/power_h200.sh [PAIRS]   (default 10 A/A and 10 detection pairs per arm kind)
set -uo pipefail
source benchmarks/h200_env.sh
n=${1:-10}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
geo=(--preset glm5 --device cuda --server-args "--layers 40 --max-total-tokens 32768" --max-tokens 16)
timeout 540 python3 benchmarks/decisions.py --arms interleaved --calibration 10 --aa-pairs "$n" \
  --detect-layers 2:"$n" --repeats 5 --looks 3 --workers 4 "${geo[@]}" \
  --out "$OUT/power-interleaved.json" >"$OUT/power-interleaved.log" 2>&1 &
a=$!
timeout 540 python3 benchmarks/decisions.py --arms alternating --calibration 8 --aa-pairs "$n" \
  --detect-layers 2:"$n" --repeats 3 --looks 3 --workers 4 --max-launches-per-arm 4 "${geo[@]}" \
  --out "$OUT/power-alternating.json" >"$OUT/power-alternating.log" 2>&1 &
b=$!
sleep 60; nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
wait $a; echo "interleaved exit $?"; wait $b; echo "alternating exit $?"
for f in interleaved alternating; do echo "== $f"; grep -v Warn "$OUT/power-$f.log" | grep "^|\|wall" | tail -8; done
pkill -f mla_server.server; sleep 2; nvidia-smi --query-gpu=memory.used --format=csv,noheader
