#!/usr/bin/env bash
# The gain model's held-out traces on one H200 (issue 42): `gain_traces_h200.py` in one device call.
# The device tool sends the session's checkout, not a helper's worktree, so the pieces travel as one
# git-ignored folder (build/ is ignored) made here first:
#   bash benchmarks/gain_traces_h200.sh prepare DEST   # DEST: <checkout>/build/gainmodel
# which holds the two targets instrumented by perfloop's hook (`cast`: as shipped, `fixed`: the
# kv-cache-full-pool-cast diff applied) and the two scripts; then, on the device, from the checkout:
#   bash build/gainmodel/gain_traces_h200.sh run [--variants cast,fixed]
# (carry build/gainmodel). Outputs under $OUT: traces-<variant>.tar, realized.json, run.log.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
prepare)
  dest=$2
  rm -rf "$dest" && mkdir -p "$dest/targets"
  cp "$here/gain_traces_h200.py" "$here/mla_server_decode.py" "$here/gain_traces_h200.sh" "$dest/"
  for v in cast fixed; do
    cp -r "$here/../examples/targets/mla_server" "$dest/targets/$v"
    find "$dest/targets/$v" -name __pycache__ -prune -exec rm -rf {} +
  done
  (cd "$dest/targets/fixed" && patch -p1 -s <"$here/../playbooks/catalog/kv-cache-full-pool-cast/patches/mla_server.diff") || exit 1
  for v in cast fixed; do
    PYTHONPATH="$here/.." "${PYTHON:-$here/../.venv/bin/python}" -c "
import sys; from pathlib import Path
from tools.workspace.instrumentation import instrumented_source
p = Path(sys.argv[1]); p.write_text(instrumented_source(p.read_text()))" "$dest/targets/$v/mla_server/model_runner.py" || exit 1
  done
  du -sh "$dest"
  ;;
run)
  shift
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  PYTHONUNBUFFERED=1 python3 "$here/gain_traces_h200.py" "$here/targets" "$OUT" "$@" 2>&1 | tee "$OUT/run.log"
  ;;
*) echo "usage: gain_traces_h200.sh prepare DEST | run [options]" >&2; exit 2 ;;
esac
