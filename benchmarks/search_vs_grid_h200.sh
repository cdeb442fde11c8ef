#!/usr/bin/env bash
# The demo server's launch options at concurrency 8 on one H200 (glm5 preset): perfloop's TPE search
# against an auto_tune-style grid at the same launch budget (benchmarks/search_vs_grid.py). Like
# gpu_demo_h200.sh: perfloop's pure-Python deps travel as wheels in .whl/ (here also optuna,
# colorlog and tqdm, which `import optuna` loads); outputs go to $OUT. Extra arguments go to the
# script (e.g. --budget 3 --windows 2 to stay well inside one 9-minute call).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 530 python3 benchmarks/search_vs_grid.py --preset glm5 --device cuda --concurrency 8 --out "$OUT" "$@" 2>&1 | tee "$OUT/search_vs_grid.log"
