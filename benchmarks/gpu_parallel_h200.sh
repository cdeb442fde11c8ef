#!/usr/bin/env bash
# Two candidates on two GPUs of one machine: `benchmarks/parallel_hosts.py` with the demo's glm5
# preset on cuda, two [[hosts]] whose servers get GPU 0 and GPU 1 ([hosts.env]
# CUDA_VISIBLE_DEVICES), candidates tried at once (--parallel 2) or one after another (1).
# Carries perfloop's pure-Python deps (and pytest, for the test helpers the benchmark uses) as
# wheels in .whl/ and git as a Debian package in .gitdeb/, like gpu_loop_h200.sh.
# Usage (on nvidia-h200-x2): bash benchmarks/gpu_parallel_h200.sh NAME [parallel_hosts.py options]
# e.g. `bash benchmarks/gpu_parallel_h200.sh pairs --rounds 2 --builtin kv-cache-full-pool-cast`
# (writes $OUT/NAME.json).
set -uo pipefail
name=$1
shift
source benchmarks/h200_env.sh
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader
python3 benchmarks/parallel_hosts.py --device cuda --preset glm5 --gpus --out "$OUT/$name.json" "$@"
echo "benchmark exit $?"
