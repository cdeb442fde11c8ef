#!/usr/bin/env bash
# Issue 57's must-show on one H100 or H200: `perfloop run` on the demo's target with the `[decide]`
# defaults (`--preset glm5 --device cuda`), from a fresh PERFLOOP_HOME, with a comment-only patch
# (benchmarks/noop_sessions.py --defaults cuda:glm5); prints the verdict, the interval, whether it
# was called the same (the CI within +-min_gain) and the calibration + baseline time from the
# session's transitions. Under 6 minutes (the session is cut at 290 s); every server it started is
# stopped on the way out (by process group, whatever ended it). Carries perfloop's pure-Python deps
# as wheels (.whl/) and git as Debian packages (.gitdeb/) like gpu_demo_h200.sh: run it with
#   run(command="bash benchmarks/first_verdict_gpu.sh", carry=[".whl", ".gitdeb"])
# Writes first-verdict.log, first-verdict.json, show.txt, show.json and the session export to $OUT.
set -uo pipefail
# FV_PYTHON=.venv/bin/python FV_DEFAULTS=cpu:cpu: the same on this machine's CPU (a dry run of the script)
if [ -z "${FV_PYTHON:-}" ]; then source benchmarks/h200_env.sh; fi
py=${FV_PYTHON:-python3}
OUT=${OUT:-/tmp/first-verdict-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null; uptime
stop_servers() {  # servers of the session (their cwd: the demo copy under /tmp/noop-*), by process group
  for d in /proc/[0-9]*; do
    case "$(readlink "$d/cwd" 2>/dev/null)" in
      /tmp/noop-*) kill -KILL -- "-$(ps -o pgid= -p "${d#/proc/}" | tr -d ' ')" 2>/dev/null;;
    esac
  done
}
sessions() {  # the perfloop CLI of the session (its PERFLOOP_HOME is under /tmp/noop-*)
  grep -lsz '^PERFLOOP_HOME=/tmp/noop-' /proc/[0-9]*/environ | cut -d/ -f3
}
trap stop_servers EXIT
t0=$(date +%s)
"$py" benchmarks/noop_sessions.py --sessions 1 --defaults "${FV_DEFAULTS:-cuda:glm5}" \
  --out "$OUT/first-verdict.json" >"$OUT/first-verdict.log" 2>&1 &
bench=$!
# past 290 s: the session is interrupted (SIGTERM: perfloop stops its servers), then killed
( sleep "${FV_DEADLINE:-290}"; for p in $(sessions); do kill -TERM "$p" 2>/dev/null; done; sleep 20
  for p in $(sessions); do kill -KILL "$p" 2>/dev/null; done; kill -KILL "$bench" 2>/dev/null ) >/dev/null 2>&1 &
watchdog=$!
wait "$bench"; rc=$?
pkill -P "$watchdog" 2>/dev/null; kill "$watchdog" 2>/dev/null
echo "noop_sessions exit $rc after $(( $(date +%s) - t0 )) s"
stop_servers
grep -v Warn "$OUT/first-verdict.log" | tail -8
"$py" - "$OUT" <<'PY'
import json, os, subprocess, sys
from datetime import datetime
out = sys.argv[1]
try:
    (r,) = json.load(open(f"{out}/first-verdict.json"))
except (OSError, ValueError) as e:
    sys.exit(f"no result: {e}")
if r["verdict"] == "error":
    print(f"the session did not finish: {r.get('error')}")
if "home" not in r or not os.listdir(f"{r['home']}/sessions"):
    sys.exit("no session to show")
r["session"] = r.get("session") or sorted(os.listdir(f"{r['home']}/sessions"))[-1]
env = {**os.environ, "PERFLOOP_HOME": r["home"]}
cli = [sys.executable, "-c", "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()"]
shown = subprocess.run([*cli, "show", r["session"], "--json"], env=env, capture_output=True, text=True)
open(f"{out}/show.json", "w").write(shown.stdout)
text = subprocess.run([*cli, "show", r["session"]], env=env, capture_output=True, text=True)
open(f"{out}/show.txt", "w").write(text.stdout + text.stderr)
subprocess.run([*cli, "export", r["session"], "-o", f"{out}/first-verdict-session.json.gz"], env=env)
s = json.loads(shown.stdout)
at = {t["node"]: datetime.fromisoformat(t["at"]) for t in reversed(s["transitions"])}  # each node's first
start = datetime.fromisoformat(s["session"]["created_at"])
(d,) = s["decisions"][-1:] or [{"verdict": r["verdict"], "judgement": None, "reason": r.get("error")}]
j = d["judgement"]
lk = j["looks"][-1] if j else None
same = lk is not None and lk["ci_low"] >= 1 / (1 + j["min_gain"]) and lk["ci_high"] <= 1 + j["min_gain"]
within3 = lk is not None and lk["ci_low"] >= 0.97 and lk["ci_high"] <= 1.03
print(f"verdict: {d['verdict']}" + (" (same: the CI within +-min_gain)" if same else ""))
if lk is not None:
    print(f"interval: {lk['speedup']:.3f}x [{lk['ci_low']:.3f}, {lk['ci_high']:.3f}] at look {lk['look']}/{lk['of']}, "
          f"{j['launch_noise']['sigma_log']:.2%} launch noise over {j['launch_noise']['df']} df; within +-3%: {within3}")
print(f"decision: {d['reason']}")
if "baseline" in at:
    print(f"calibration + baseline: {(at['baseline'] - start).total_seconds():.0f} s from the session's start "
          f"({(at['baseline'] - at['launch']).total_seconds():.0f} s after the first launch was healthy)")
print(f"session: {r['wall_s']:.0f} s, {r.get('launches', '?')} server launches")
print("baseline note:", next((t["note"] for t in s["transitions"] if t["node"] == "baseline"), "-")[:1500])
PY
left=0; for d in /proc/[0-9]*; do case "$(readlink "$d/cwd" 2>/dev/null)" in /tmp/noop-*) left=$((left + 1));; esac; done
echo "processes of the session still running: $left"
