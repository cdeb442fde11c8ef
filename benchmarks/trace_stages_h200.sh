#!/usr/bin/env bash
# Where `perfloop analyze` spends its time on the H200 host (issue 49): trace_stages.py on the
# 640 MB H200-shaped trace with 1, 2 and all the host's cores. Writes trace-stages-h200.log to $OUT.
set -uo pipefail
source benchmarks/h200_env.sh
# h200_env.sh installs the wheels with --no-compile: compile them (and perfloop) as a pip install
# would, or every run compiles its imports from source (0.6-0.8 s of start-up on this host)
python3 -m compileall -q -j 0 /tmp/site "$PWD" >/dev/null 2>&1
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import h200_traces; from pathlib import Path; h200_traces.tile(Path('/tmp/one.trace.json'), 640_000_000, 0, 1)"
lscpu | grep -E "Model name|MHz|^CPU\(s\)|Thread|Socket" ; uptime
for w in 1 2 "$(nproc)"; do
  echo "PERFLOOP_TRACE_WORKERS=$w"
  PERFLOOP_TRACE_WORKERS=$w timeout 200 python3 benchmarks/trace_stages.py /tmp/one.trace.json --repeats 3
done 2>&1 | tee "$OUT/trace-stages-h200.log"
rm -f /tmp/one.trace.json
