#!/usr/bin/env bash
# Issue 24's detection benchmark over more than one device call (one call is at most 600 s): the
# run goes on in the background between calls of a warm machine, and each call reports on it.
#   bash benchmarks/power_h200_span.sh start   # set-up, the run started, then as `wait`
#   bash benchmarks/power_h200_span.sh wait    # up to WAIT_S (570) for it; its log so far to $OUT
#   bash benchmarks/power_h200_span.sh stop    # the run and every server of it stopped
# Call `wait` again within the machine's idle release (30 s) until it says "done": a released
# machine loses the run. The run (benchmarks/decisions.py, alternating arms, one session at a time
# on the GPU): WARMUP (4) launches discarded (a cold machine's first launches ran up to 6% faster,
# run 6), CAL (6) calibration launches, then PAIRS (10) sessions whose reference runs LAYERS (3)
# extra layer passes per decode step of a BASE_LAYERS-layer (36) model (the true change: 3 passes
# measured 1.052-1.075x at 32 layers, 1.044x at 40 on another day) and PAIRS A/A sessions, one of
# each in turn (--round-robin, so a run the deadline cuts stays balanced and two runs on two
# machines combine: `decisions.py --combine A.json B.json`), each planned for `[decide]
# keep_power` KEEP_POWER (0.95) with at most MAXL (12) launches per arm; no session or round starts
# after DEADLINE_S (1580) s, and the table counts only sessions that reached their verdict.
# ARMS=interleaved measures each session's two launches side by side instead (CAL then counts
# interleaved A/A pairs), REPEATS (2) requests per prompt per look.
set -uo pipefail
dir=/tmp/power-span
what=${1:-wait}
report() {  # the log so far (the per-session lines and the latest table) and its JSON, to $OUT
  cp "$dir/power.log" "$OUT/power-span.log" 2>/dev/null
  cp "$dir/power.json" "$OUT/power-span.json" 2>/dev/null
  grep -v Warn "$dir/power.log" | grep "pair\|calibration\|warm-up\|launches,\|wall" | tail -30
}
stop_all() {
  [ -f "$dir/pid" ] && kill -- -"$(cat "$dir/pid")" 2>/dev/null
  pkill -f mla_server.server; sleep 2
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
}
case "$what" in
  start)
    source benchmarks/h200_env.sh
    stop_all >/dev/null; rm -rf "$dir"; mkdir -p "$dir"
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    n=${PAIRS:-10}
    setsid nohup python3 benchmarks/decisions.py --arms "${ARMS:-alternating}" --warmup "${WARMUP:-4}" \
      --calibration "${CAL:-6}" --round-robin --aa-pairs "$n" --aa-last --detect-layers "${LAYERS:-3}:$n" --looks 3 --repeats "${REPEATS:-2}" --max-tokens 8 \
      --max-launches-per-arm "${MAXL:-12}" --keep-power "${KEEP_POWER:-0.95}" --deadline-s "${DEADLINE_S:-1580}" \
      --preset glm5 --device cuda --server-args "--layers ${BASE_LAYERS:-36} --max-total-tokens 32768 --cuda-graph-bs 1" \
      --out "$dir/power.json" >"$dir/power.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    ;&
  wait)
    pid=$(cat "$dir/pid" 2>/dev/null) || { echo "no run started on this machine (start it first)"; exit 2; }
    end=$((SECONDS + ${WAIT_S:-570}))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 5; done
    if kill -0 "$pid" 2>/dev/null; then
      report; echo "running (pid $pid): call wait again"
    else
      report; stop_all; echo "done"
    fi
    ;;
  stop) report; stop_all ;;
  *) echo "usage: power_h200_span.sh start|wait|stop"; exit 2 ;;
esac
