#!/usr/bin/env bash
# perfloop's trace analysis on the H200 host's cores (issue 49): trace_analysis_vs_hta.py on the
# same 640 MB H200-shaped trace and eight-rank set as on the 2-core machine, with 1, 2 and all of
# the host's cores for the single trace (HTA is not installed there: its rows are left out; its
# time is the 2-core machine's). Carries perfloop's pure-Python deps as wheels (.whl/) like
# gpu_demo_h200.sh. Writes trace-analysis-h200.log to $OUT (one device call, ~3 min).
set -uo pipefail
source benchmarks/h200_env.sh
# h200_env.sh installs the wheels with --no-compile: compile them (and perfloop) as a pip install
# would, or every run compiles its imports from source (0.6-0.8 s of start-up on this host)
python3 -m compileall -q -j 0 /tmp/site "$PWD" >/dev/null 2>&1
nproc; free -g | head -2; df -h /tmp | tail -1; uptime
python3 -c "import numpy, msgspec, sys; print(sys.version.split()[0], 'numpy', numpy.__version__, 'msgspec', msgspec.__version__)"
timeout 540 python3 benchmarks/trace_analysis_vs_hta.py --size-mb 640 --ranks 8 --rank-size-mb 640 \
  --repeats 3 --workers "1,2,$(nproc)" >"$OUT/trace-analysis-h200.log" 2>&1
echo "exit $?"
tail -9 "$OUT/trace-analysis-h200.log"; uptime
