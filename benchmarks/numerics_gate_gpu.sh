#!/usr/bin/env bash
# The numerics gate's benchmark (benchmarks/numerics_gate.py) on one GPU, in one device call:
#   run(command="bash benchmarks/numerics_gate_gpu.sh", carry=[".whl"])
# glm5 geometry at LAYERS layers (default 8), PROMPTS x TOKENS (default 16 x 24), the static-shape
# decode step the server runs on cuda (no CUDA graphs, so each variant's patched code is what runs).
# perfloop's pure-Python deps (pydantic) from the cp312 wheels in .whl/ (benchmarks/h200_env.sh).
# Writes numerics-gate.json and numerics-gate.log to $OUT; cut at DEADLINE_S (default 540): the
# SIGTERM ends the run after the variant being run (the torch.compile ones run last), with the
# summary and the JSON of what was judged (`"cut": true`).
set -uo pipefail
source benchmarks/h200_env.sh
OUT=${OUT:-/tmp/numerics-gate-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
timeout "${DEADLINE_S:-540}" python3 benchmarks/numerics_gate.py --device cuda --preset glm5 \
  --layers "${LAYERS:-8}" --prompts "${PROMPTS:-16}" --tokens "${TOKENS:-24}" --json "$OUT/numerics-gate.json" --dump "$OUT/numerics-gate-sides.json" \
  "$@" 2>&1 | tee "$OUT/numerics-gate.log"
