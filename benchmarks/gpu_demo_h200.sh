#!/usr/bin/env bash
# Run `perfloop demo --device cuda --preset glm5` on a bare H200 machine (Python 3.12 + torch, no
# registry): perfloop's pure-Python deps travel as wheels in .whl/, git as Debian packages in
# .gitdeb/ (see benchmarks/README.md). Outputs go to $OUT.
set -uo pipefail
if ! command -v git >/dev/null; then
  for f in .gitdeb/*.deb; do dpkg -x "$f" /tmp/gitroot; done
  export PATH=/tmp/gitroot/usr/bin:$PATH GIT_EXEC_PATH=/tmp/gitroot/usr/lib/git-core
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PERFLOOP_HOME=/tmp/plh PYTHONUNBUFFERED=1
perfloop() { python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" "$@"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
perfloop demo --device cuda --preset glm5 "$@" --json 2>&1 | tee "$OUT/demo.log"
sid=$(tail -1 "$OUT/demo.log" | python3 -c "import json,sys; print(json.load(sys.stdin)['session'])")
perfloop show "$sid" > "$OUT/show.txt" 2>&1
perfloop export "$sid" -o "$OUT/gpu-demo-session.json.gz"
cp /tmp/plh/sessions/"$sid"/logs/server-1.log "$OUT/server-1.log" 2>/dev/null
tail -5 "$OUT/show.txt"
