#!/usr/bin/env bash
# Paired blocks' false-accept rate and power on the H200s of one host (issue 45): decisions.py
# --arms blocks on the demo's glm5 geometry cut to 20 layers, on cuda, the rule exactly as the loop
# applies it (agent/decision/stats/blocks.py) with the history pooled as the loop pools it
# (`--variants calibrated`): no-op sessions (the same tree in both arms) and sessions whose
# reference runs 6 extra layer passes (10 realized 1.08x on 2026-12-04; the realized size is
# printed as the median speedup). One session at a time on each GPU (`--gpus`: worker i's servers
# on GPU i), one of each scenario in turn, so a run the deadline cuts stays balanced. Carries
# perfloop's pure-Python deps as wheels (.whl/) and git as Debian packages (.gitdeb/) like
# gpu_demo_h200.sh. Writes blocks-h200.log and blocks-h200.json to $OUT (one device call, < 10 min).
# Flags after the script's name go to decisions.py (a later value wins; --detect-layers adds a scenario).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source benchmarks/h200_env.sh
n=$(nvidia-smi -L | wc -l); gpus=$(seq -s, 0 $((n - 1)))
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc; uptime
timeout 560 python3 benchmarks/decisions.py --arms blocks --variants calibrated --preset glm5 --device cuda \
  --server-args "--layers 20" --calibration 4 --aa-pairs 20 --detect-layers 6:20 \
  --repeats 3 --looks 3 --max-tokens 16 --workers "$n" --gpus "$gpus" --round-robin --deadline-s 520 \
  --out "$OUT/blocks-h200.json" "$@" >"$OUT/blocks-h200.log" 2>&1
echo "exit $?"
for d in /proc/[0-9]*; do  # servers of sessions the time limit stopped, by process group
  case "$(readlink "$d/cwd" 2>/dev/null)" in /tmp/decisions-*) kill -KILL -- "-$(ps -o pgid= -p "${d#/proc/}" | tr -d ' ')" 2>/dev/null;; esac
done
grep -v Warn "$OUT/blocks-h200.log" | tail -8; uptime
