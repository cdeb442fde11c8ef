#!/usr/bin/env bash
# Issue 61's must-show on one H100 or H200: `perfloop run` on the glm5 preset target with the
# builtin playbooks and the search together (`--proposer chain`: every source's candidates ranked by
# predicted gain per launch-minute, the whole chain judged against the baseline at the end), from a
# fresh PERFLOOP_HOME. Carries perfloop's pure-Python deps as wheels and git as Debian packages:
#   run(command="bash benchmarks/chain_gpu.sh", carry=[".whl", ".gitdeb"])
# The session is cut (SIGTERM, then KILL) at CHAIN_DEADLINE seconds (default 540: one device call
# is 10 minutes); every server under the demo copy is stopped on the way out by process group.
# Writes chain.json (the summary: its `chain` field), show.txt, show.json and the export to $OUT.
# CHAIN_PYTHON=.venv/bin/python CHAIN_TARGET=FILE.toml: the same on this machine (a dry run on a CPU
# target whose repo is $COPY).
set -uo pipefail
if [ -z "${CHAIN_PYTHON:-}" ]; then source benchmarks/h200_env.sh; else
  perfloop() { "$CHAIN_PYTHON" -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" "$@"; }
fi
OUT=${OUT:-/tmp/chain-out}; mkdir -p "$OUT"
COPY=/tmp/mla_server  # the repo examples/targets/mla_server_glm5.toml names
export PERFLOOP_HOME=/tmp/chain-home-$$
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null; uptime
rm -rf "$COPY" && cp -r examples/targets/mla_server "$COPY" && find "$COPY" -name __pycache__ -prune -exec rm -rf {} +
(cd "$COPY" && git init -q -b main && git add -A && git -c user.name=p -c user.email=p@x commit -qm mla_server)
stop_servers() {  # servers whose cwd is the demo copy or its reference copies
  for d in /proc/[0-9]*; do
    case "$(readlink "$d/cwd" 2>/dev/null)" in
      "$COPY"*|"$PERFLOOP_HOME"*) kill -KILL -- "-$(ps -o pgid= -p "${d#/proc/}" | tr -d ' ')" 2>/dev/null;;
    esac
  done
}
trap stop_servers EXIT
t0=$(date +%s)
perfloop run "${CHAIN_TARGET:-examples/targets/mla_server_glm5.toml}" --proposer chain --max-iterations 3 \
  --approve auto --json >"$OUT/chain.json" 2>"$OUT/chain.log" &
session=$!
( sleep "${CHAIN_DEADLINE:-540}"; kill -TERM "$session" 2>/dev/null; sleep 20; kill -KILL "$session" 2>/dev/null ) \
  >/dev/null 2>&1 &
watchdog=$!
wait "$session"; rc=$?
pkill -P "$watchdog" 2>/dev/null; kill "$watchdog" 2>/dev/null
echo "perfloop run exit $rc after $(( $(date +%s) - t0 )) s"
stop_servers
perfloop show last >"$OUT/show.txt" 2>&1; perfloop show last --json >"$OUT/show.json" 2>/dev/null
perfloop export last -o "$OUT/chain-session.json.gz" >/dev/null 2>&1
grep -E "speedup|chain|TPOT|accepted|stopped" "$OUT/show.txt" | tail -12
"${CHAIN_PYTHON:-python3}" - "$OUT/chain.json" <<'EOF'
import json, re, sys
try:
    s = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    sys.exit(f"no summary: {exc}")
c = s.get("chain") or {}
kinds = {link["kind"] for link in c.get("links", [])}
whole = (c.get("whole") or {}).get("judgement") or {}
last = (whole.get("looks") or [{}])[-1]
gate = s.get("output_gate") or ""
classes = {name: cls for name, cls in re.findall(r"([\w.-]+) \(kept\): (exact|within|beyond)", gate)}
print(f"TPOT {s['tpot_ms_before']:.1f} -> {s['tpot_ms_after']:.1f} ms; kept {s['accepted']}; kinds {sorted(kinds)}")
print(f"whole chain: {last.get('speedup', 0):.2f}x [{last.get('ci_low', 0):.2f}, {last.get('ci_high', 0):.2f}] "
      f"{whole.get('verdict')}; output gate: {gate}")
print("each kept change's class:", ", ".join(f"{k} {classes.get(k, 'NOT PRINTED')}" for k in s["accepted"]))
print("beyond (refused for its math):", ", ".join(re.findall(r"([\w.-]+) \(rejected\): beyond", gate)) or "none")
met = (s["tpot_ms_after"] or 99) < 12 and all(k in classes for k in s["accepted"])
print("must-show (< 12 ms, every kept change's class):", "met" if met else "NOT met",
      "(goal < 10 ms: " + ("met)" if (s["tpot_ms_after"] or 99) < 10 else "not met)"))
EOF
