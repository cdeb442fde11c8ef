#!/usr/bin/env bash
# The decision-rule benchmarks on the H200 machine's 16 quiet CPU cores (the demo server on the CPU,
# one torch thread per server): decisions.py with interleaved arms, and the 20 no-op sessions. Carries perfloop's pure-Python deps
# as wheels (.whl/) and git as a Debian package (.gitdeb/) like gpu_loop_h200.sh. Writes logs and
# JSON to $OUT.   Usage: bash benchmarks/decisions_h200.sh [decisions|sessions|all]  (each part < 10 min)
set -uo pipefail
source benchmarks/h200_env.sh
nproc; uptime
common=(--threads 1 --repeats 5 --looks 3 --max-tokens 12)
part=${1:-all}
if [ "$part" = decisions ] || [ "$part" = all ]; then
  timeout 540 python3 benchmarks/decisions.py --arms interleaved --calibration 6 --aa-pairs 20 --detect 1.3:20 \
    --detect 1.1:10 --workers 5 "${common[@]}" --out "$OUT/decisions-interleaved.json" >"$OUT/decisions-interleaved.log" 2>&1
  echo "interleaved exit $?"; grep -v Warn "$OUT/decisions-interleaved.log" | tail -12; uptime
fi
if [ "$part" = sessions ] || [ "$part" = all ]; then
  timeout 540 python3 benchmarks/noop_sessions.py --sessions 20 --workers 6 --out "$OUT/noop.json" >"$OUT/noop.log" 2>&1
  echo "noop exit $?"; tail -8 "$OUT/noop.log"; uptime
fi
