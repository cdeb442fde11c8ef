#!/usr/bin/env bash
# Does the numerics gate's float32 precision reference of glm5 (78 layers) fit beside its bfloat16
# baseline on one card? The two servers the gate runs at once, as it launches them: the baseline
# (`--preset glm5 --device cuda`, the full 495,552-slot FP8 pool) and the same tree with the demo
# engine's `precise` + `precise_small` flags (`--dtype float32 --max-total-tokens 16384`). One
# device call, no wheels needed: run(command="bash benchmarks/precise_fit_gpu.sh"). Prints the
# card's memory with both up and one scored request on each, then stops both.
set -uo pipefail
cd examples/targets/mla_server || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
start() {  # port, extra flags...
  local port=$1; shift
  setsid python3 -m mla_server.server --port "$port" --preset glm5 --device cuda "$@" >"/tmp/fit-$port.log" 2>&1 &
  echo $!
}
up() {  # port, deadline seconds
  for _ in $(seq "$2"); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 1; done
  echo "port $1 not healthy in $2 s:"; tail -5 "/tmp/fit-$1.log"; return 1
}
t0=$(date +%s)
base=$(start 30001); up 30001 240 && echo "baseline up after $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/baseline alone: /'
t1=$(date +%s)
precise=$(start 30002 --dtype float32 --max-total-tokens 16384); up 30002 240 && echo "precise up after $(( $(date +%s) - t1 )) s"
nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/both: /'
for port in 30001 30002; do
  curl -s -m 120 "http://127.0.0.1:$port/v1/completions" -H 'content-type: application/json' \
    -d '{"model":"mla-demo","prompt":"Explain the KV cache in one sentence.","max_tokens":16,"temperature":0,"logprobs":1}' \
    | python3 -c "import json,sys; c=json.load(sys.stdin)['choices'][0]; print($port, repr(c['text'][:40]), [round(x,3) for x in c['logprobs']['token_logprobs'][:6]])" \
    || { echo "port $port: no completion"; tail -5 "/tmp/fit-$port.log"; }
done
nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/after scoring: /'
grep -h "KV pool" /tmp/fit-30001.log /tmp/fit-30002.log
kill -- -"$base" -"$precise" 2>/dev/null; sleep 2; kill -KILL -- -"$base" -"$precise" 2>/dev/null
echo "stopped both after $(( $(date +%s) - t0 )) s"
