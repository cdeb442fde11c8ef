"""`perfloop eval proposer` against the scripted models: the eval's own check, and the recordings
CI replays (tests/llm/test_eval.py).

Each scripted model is the fake OpenAI-compatible server of the tests (tests/llm/fake_openai.py,
real HTTP on 127.0.0.1) with a fixed script for the demo-cast task:
- `scripted-fix`: reads the attention backend, answers the gather-then-cast fix;
- `scripted-learner`: answers a faster patch that attends to the last 4 KV rows only (outputs
  change), is told so, sends it again (refused before any launch), then the fix;
- `scripted-wrong`: answers that wrong patch every time (a negative control).

Each runs `perfloop eval proposer --model NAME --base-url URL --record OUT/NAME` under a fresh
PERFLOOP_HOME (the real CPU demo server, launched and measured), then the scores of all are
printed as one Markdown table. Usage:

    PYTHONPATH=. .venv/bin/python benchmarks/eval_scripted.py [OUT]   # default tests/data/eval
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.proposer.evaluation import Score, markdown  # noqa: E402
from tests.llm.conftest import BACKEND, OLD, fix_answer  # noqa: E402
from tests.llm.fake_openai import ScriptedModel, Step, call, reply  # noqa: E402

WRONG = OLD.replace("k_buffer[kv_indices], causal", "k_buffer[kv_indices[-4:]].to(q.dtype), causal").replace(
    "get_key_buffer(layer_id).to(q.dtype)", "get_key_buffer(layer_id)"
)
"""Faster (casts 4 rows per request) and wrong (attends to them only)."""
READ: Step = reply(None, call("read_file", path=BACKEND))

SCRIPTS: dict[str, list[Step]] = {
    "scripted-fix": [READ, reply(fix_answer())],
    "scripted-learner": [
        READ,
        reply(fix_answer(new=WRONG)),
        reply(fix_answer(new=WRONG)),
        reply(fix_answer()),
    ],
    "scripted-wrong": [READ, *[reply(fix_answer(new=WRONG)) for _ in range(12)]],
}


def run(name: str, script: list[Step], out: Path) -> list[Score]:
    """One scripted model through the whole suite; its recorded scores."""
    with tempfile.TemporaryDirectory(prefix="perfloop-eval-") as home, ScriptedModel(script) as model:
        env = {**os.environ, "PERFLOOP_HOME": home, "OPENAI_API_KEY": "sk-scripted-not-a-key-0000"}
        cmd = [sys.executable, "-m", "agent.cli", "eval", "proposer", "--model", name]
        cmd += ["--base-url", model.base_url, "--record", str(out / name), "--json"]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{name}: perfloop eval exited {proc.returncode}: {proc.stderr[-2000:]}")
        print(f"{name}: {len(model.requests)} request(s) to the scripted model", file=sys.stderr)
    return [Score.model_validate(s) for s in json.loads(proc.stdout.strip().splitlines()[-1])]


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "eval"
    names = sys.argv[2:] or list(SCRIPTS)
    scores = [s for name in names for s in run(name, SCRIPTS[name], out)]
    print(markdown(scores))


if __name__ == "__main__":
    main()
