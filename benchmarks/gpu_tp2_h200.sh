#!/usr/bin/env bash
# Tensor parallel on two H200s (kind nvidia-h200-x2), one call of at most ~9.5 minutes, outputs in $OUT:
#   1. tp-greedy.json: the demo server at --tp-size 1 and 2 (glm5 geometry, 12 layers to start fast):
#      greedy texts, CUDA-graph batch sizes of each, one /start_profile trace per rank.
#   2. decode-tp2.txt: benchmarks/mla_server_decode.py --compare-fix at --tp-size 2 (glm5): TPOT of the
#      full-pool cast against gather-then-cast, outputs compared.
#   3. loop.log, show.txt, session.json.gz, findings.json: `perfloop demo --device cuda --preset glm5
#      --server-args='--tp-size 2' --profile-method api --max-iterations 1`: baseline against the loop's result; each
#      profile's two rank traces merged and diagnosed (collective share, rank spread, straggler).
#   4. replay.json: the export imported into an empty store and replayed offline.
# NVLink multicast stays off in every process (the variables below; the server sets them again for
# its ranks). Carries perfloop's pure-Python deps as wheels (.whl/) and git as Debian packages
# (.gitdeb/) like gpu_loop_h200.sh. DEVICE=cpu PRESET=cpu runs the same steps without a GPU (gloo),
# to check the script itself; STEPS (default 1234) picks the parts, LOOP_S the loop's time limit.
# Usage: bash benchmarks/gpu_tp2_h200.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
DEVICE=${DEVICE:-cuda} PRESET=${PRESET:-glm5} STEPS=${STEPS:-1234} OUT=${OUT:?set OUT to the output folder}
if ! command -v git >/dev/null; then
  for f in .gitdeb/*.deb; do dpkg -x "$f" /tmp/gitroot; done
  export PATH=/tmp/gitroot/usr/bin:$PATH GIT_EXEC_PATH=/tmp/gitroot/usr/lib/git-core
fi
if ! python3 -c "import pydantic, langgraph" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PERFLOOP_HOME=${PERFLOOP_HOME:-/tmp/plh-tp2}
perfloop() { python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" "$@"; }
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
started=$(date +%s)
stamp() { echo "[$(($(date +%s) - started)) s] $*"; }
stop_strays() {  # SIGKILL the process group of each process whose working directory starts with $1
  for d in /proc/[0-9]*; do
    case "$(readlink "$d/cwd" 2>/dev/null)" in "$1"*) kill -KILL -- "-$(ps -o pgid= -p "${d#/proc/}" | tr -d ' ')" 2>/dev/null;; esac
  done
}

if [[ $STEPS == *1* ]]; then
stamp "1. TP1 against TP2: greedy texts, graphs, a trace per rank"
small=(--preset "$PRESET" --device "$DEVICE")
[ "$PRESET" = glm5 ] && small+=(--layers 12)
[ "$DEVICE" = cpu ] && small+=(--pool-slots 4096)  # a dry run on a small shared CPU
timeout 150 python3 - "$OUT" "${small[@]}" <<'PY' >"$OUT/tp-greedy.json" 2>"$OUT/tp-greedy.err"
import json, os, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path
out, flags = Path(sys.argv[1]), sys.argv[2:]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # `timeout`: stop the servers on the way out
def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())
def run(tp):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    log = open(out / f"server-tp{tp}.log", "w")
    proc = subprocess.Popen(["bash", "examples/targets/mla_server/launch.sh", "--port", str(port), *flags,
                             "--tp-size", str(tp)], stdout=log, stderr=log, start_new_session=True,
                            env={**os.environ, "PYTHON": sys.executable})
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(base + "/health", timeout=1); break
            except OSError:
                time.sleep(0.5)
        info = json.loads(urllib.request.urlopen(base + "/get_server_info").read())
        texts = [post(base + "/generate", {"text": p, "sampling_params": {"max_new_tokens": 24, "temperature": 0}})["text"]
                 for p in ("The KV cache holds", "Tensor parallel decode")]
        post(base + "/start_profile", {"output_dir": str(out / f"traces-tp{tp}"), "num_steps": 3, "profile_id": "smoke"})
        post(base + "/generate", {"text": "profile", "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
        time.sleep(2)
        traces = sorted(p.name for p in (out / f"traces-tp{tp}").glob("*.trace.json.gz"))
        return {"tp": tp, "texts": texts, "cuda_graph_batch_sizes": info["cuda_graph_batch_sizes"], "traces": traces}
    finally:
        os.killpg(proc.pid, signal.SIGTERM); proc.wait(60)
        time.sleep(1)
        left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
        print(json.dumps({"tp": tp, "group_left_after_stop": left}), file=sys.stderr)
one, two = run(1), run(2)
print(json.dumps({"tp1": one, "tp2": two, "greedy_identical": one["texts"] == two["texts"]}, indent=1))
PY
echo "exit $?"; cat "$OUT/tp-greedy.json"; tail -3 "$OUT/tp-greedy.err"
fi

if [[ $STEPS == *2* ]]; then
stamp "2. full-pool cast against gather-then-cast at TP2 (mla_server_decode.py)"
timeout 170 python3 benchmarks/mla_server_decode.py --device "$DEVICE" --preset "$PRESET" --compare-fix \
  --repeats 3 --max-tokens 32 --profile-steps 3 -- --tp-size 2 >"$OUT/decode-tp2.txt" 2>&1
echo "exit $?"; tail -6 "$OUT/decode-tp2.txt"
stop_strays /tmp/mla_bench_  # servers of a benchmark stopped by its time limit, by process group
fi

if [[ $STEPS == *3* ]]; then
stamp "3. the loop at TP2"
left=${LOOP_S:-$(( 480 - ($(date +%s) - started) ))}
[ "$left" -lt 120 ] && left=120
timeout "$left" python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" \
  demo --device "$DEVICE" --preset "$PRESET" --server-args='--tp-size 2' --profile-method api \
  --max-iterations 1 --json >"$OUT/loop.log" 2>&1
echo "demo exit $?"
stop_strays "$PERFLOOP_HOME/"  # servers of a loop stopped by its time limit
sid=$(python3 -c "
import json, sys
for line in reversed(open(sys.argv[1]).read().splitlines()):
    if line.startswith('{'):
        print(json.loads(line)['session']); break
" "$OUT/loop.log")
[ -n "$sid" ] || sid=$(ls -t "$PERFLOOP_HOME/sessions" | head -1)
perfloop show "$sid" >"$OUT/show.txt" 2>&1
cp "$PERFLOOP_HOME"/sessions/"$sid"/logs/server-*.log "$OUT/" 2>/dev/null
perfloop export "$sid" -o "$OUT/session.json.gz"
python3 - "$sid" >"$OUT/findings.json" <<'PY'
import json, sys
from agent.sessions.runner import Sessions
from playbooks.engine import diagnose, load_playbooks
from state.profiling.diagnosis import DiagnosisContext
from tools.trace import read_profiles
state = Sessions().state(sys.argv[1])
out = []
for p in state.profiles:
    prof = read_profiles([p.trace_path])
    d = diagnose(prof, DiagnosisContext(target_kind="mla_server", active_tokens=p.active_tokens), load_playbooks())
    out.append({"iteration": p.iteration, "trace": str(p.trace_path),
                "collectives": prof.collectives.model_dump() if prof.collectives else None,
                "ranks": [r.model_dump() for r in prof.ranks],
                "bounds": prof.step_bounds.model_dump() if prof.step_bounds else None,
                "top_kernels": [(k.name[:80], round(k.share, 4)) for k in prof.kernels[:8]],
                "findings": [f.model_dump(include={"playbook", "expected_gain_share", "step_ms", "predicted_step_ms",
                                                   "bound", "confidence"}) for f in d.findings]})
print(json.dumps({"session": sys.argv[1], "launch_argv": state.launch_argv, "profiles": out,
                  "decisions": [d.model_dump(mode="json") for d in state.decisions]}, indent=1))
PY
tail -25 "$OUT/show.txt"
python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
for p in d['profiles']:
    c = p['collectives'] or {}
    print('profile', p['iteration'], 'collective share', c.get('share'), 'rank step us', c.get('rank_step_us'),
          'spread', c.get('spread'), 'straggler', c.get('straggler'), [f['playbook'] for f in p['findings']])
" "$OUT/findings.json"
fi

if [[ $STEPS == *4* ]]; then
stamp "4. the export replayed offline, in an empty store"
sid=${sid:-$(ls -t "$PERFLOOP_HOME/sessions" | head -1)}
rm -rf /tmp/plh-replay
PERFLOOP_HOME=/tmp/plh-replay perfloop import "$OUT/session.json.gz" >/dev/null 2>&1
PERFLOOP_HOME=/tmp/plh-replay timeout 60 python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" \
  replay "$sid" --json >"$OUT/replay.json" 2>&1
echo "replay exit $?"; tail -c 400 "$OUT/replay.json"; echo
fi
stamp "done"
