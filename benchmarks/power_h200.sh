#!/usr/bin/env bash
# Issue 24's benchmark on one H200 in one device call: how often the decision rule keeps a true
# ~1.05x change and a no-op, with interleaved arms and/or alternating relaunches
# (benchmarks/decisions.py: real launches of the demo server under CUDA graphs, perfloop's client
# and rule). A smaller geometry of the glm5 preset (40 layers, a 32,768-slot pool) so that many
# servers fit at once; the true change is 2 extra layer passes per decode step
# (BENCH_EXTRA_LAYERS, ~2/40 more layer work, outputs unchanged), given to the reference arm, so
# the candidate is the faster tree. Each kind writes its log and JSON to $OUT.
#   bash benchmarks/power_h200.sh [both|interleaved|alternating] [PAIRS] [LIMIT_S] [all|detect]
# (defaults: both side by side on the one GPU, 10 A/A and 10 detection pairs each, 540 s;
# `detect` skips the A/A pairs and runs the 1.05x detection pairs only; WORKERS=N in the
# environment sets how many alternating sessions run at once, CAL=N their calibration launches,
# LAYERS=N the extra layer passes of the true change, 2 by default, KEEP_POWER=P and MAXL=K the
# alternating plan's power (0.8) and most launches per arm (4))
set -uo pipefail
source benchmarks/h200_env.sh
kind=${1:-both} n=${2:-10} limit=${3:-540} what=${4:-all}
aa=$n; [ "$what" = detect ] && aa=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
geo=(--preset glm5 --device cuda --server-args "--layers 40 --max-total-tokens 32768" --detect-layers "${LAYERS:-2}:$n")
pids=()
if [ "$kind" = both ] || [ "$kind" = interleaved ]; then
  timeout "$limit" python3 benchmarks/decisions.py --arms interleaved --calibration 10 --aa-pairs "$aa" \
    --repeats 5 --looks 3 --max-tokens 16 --workers 4 "${geo[@]}" \
    --out "$OUT/power-interleaved.json" >"$OUT/power-interleaved.log" 2>&1 &
  pids+=($!)
fi
if [ "$kind" = both ] || [ "$kind" = alternating ]; then
  # alone on the GPU: shorter requests and more sessions at once (7 servers at most)
  w=4 reps=(--repeats 3 --max-tokens 16); [ "$kind" = alternating ] && w=7 reps=(--repeats 2 --max-tokens 8)
  w=${WORKERS:-$w}  # WORKERS=1: one session at a time, no neighbour on the GPU
  timeout "$limit" python3 benchmarks/decisions.py --arms alternating --calibration "${CAL:-6}" --aa-pairs "$aa" \
    --looks 3 --workers "$w" --max-launches-per-arm "${MAXL:-4}" --keep-power "${KEEP_POWER:-0.8}" "${reps[@]}" "${geo[@]}" \
    --out "$OUT/power-alternating.json" >"$OUT/power-alternating.log" 2>&1 &
  pids+=($!)
fi
sleep 45; nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
for p in "${pids[@]}"; do wait "$p"; echo "exit $?"; done
for f in "$OUT"/power-*.log; do echo "== $f"; grep -v Warn "$f" | grep "^|\|wall" | tail -8; done
pkill -f mla_server.server; sleep 2; nvidia-smi --query-gpu=memory.used --format=csv,noheader
