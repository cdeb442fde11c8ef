"""`perfloop eval proposer` against the scripted models: the eval's own check, and the recordings
CI replays (tests/llm/test_eval.py).

Each scripted model is the fake OpenAI-compatible server of the tests (tests/llm/fake_openai.py,
real HTTP on 127.0.0.1) with a fixed script per task:
- `scripted-fix`: on demo-cast reads the attention backend and answers the gather-then-cast fix;
  on demo-launch answers the launch option (`LAUNCH: set --max-total-tokens 4096`);
- `scripted-learner`: on demo-cast answers a faster patch that attends to the last 4 KV rows only
  (outputs change), is told so, sends it again (refused before any launch), then the fix; on
  demo-launch guesses a flag name the demo does not have (the server exits at start; it is told
  the log's tail), sends it again (refused before any launch), then the right option; on demo-port (the stored kv-cast
  patch fails to apply to the demo's "later release") first sends the stored patch's lines (they
  match nothing; it is shown the closest lines), then the port;
- `scripted-fix` on demo-port reads the backend and answers the port;
- `scripted-wrong`: answers that wrong patch every time (a negative control);
- on sglang-port (sglang 0.5.9's real source, the stored patch for 0.5.22 on to port, scored by the
  equivalence harness, no server): `scripted-fix` reads the backend and answers the port (the 0.5.9
  patch tests/sglang checks, as edit blocks); `scripted-learner` first sends the stored patch's
  lines (they match nothing in 0.5.9), then the port; `scripted-wrong` a port that gathers the
  pool's first n rows instead of the batch's (outputs change), every time.

Each (model, task) runs `perfloop eval proposer --model NAME --task TASK --base-url URL --record
OUT/NAME` under a fresh PERFLOOP_HOME (the real CPU demo server, launched and measured, or for
sglang-port the release's wheel, downloaded once; the rows of the model's other tasks in OUT/NAME
are kept), then the scores of all are printed as one Markdown
table. Usage:

    PYTHONPATH=. .venv/bin/python benchmarks/eval_scripted.py [OUT [MODEL ...] [--task=TASK ...]]
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

from agent.proposer.harness.evaluation import DECODE_NEXT, TASKS, Score, markdown  # noqa: E402
from tests.llm.conftest import BACKEND, WRONG, edit_block, fix_answer  # noqa: E402
from tests.llm.fake_openai import ScriptedModel, Step, call, reply  # noqa: E402

READ: Step = reply(None, call("read_file", path=BACKEND))
LAUNCH_FIX = (
    "The decode step casts the whole KV pool every layer: 24,576 slots, while 4 requests of at most\n"
    "1,024 tokens need 4,096. The code is off limits, so size the pool to the workload.\n"
    "LAUNCH: set --max-total-tokens 4096\n"
)
LAUNCH_TYPO = "Shrink the KV pool to the workload.\nLAUNCH: set --kv-pool-tokens 4096\n"
"""A flag the demo does not know: the server exits at start, and the model is told its log's tail."""

PORTED = """\
        cache = self.kv_pool.get_key_buffer(layer_id)
        out = q.new_zeros(q.shape[0], q.shape[1], KV_LORA_RANK)
        for row, slots in enumerate(batch.kv_indices):
            kv = cache[slots].to(dtype=q.dtype)  # gather the request's rows, then cast only those
            out[row] = self._attend(q[row : row + 1], kv, causal=False)[0]
"""
"""The stored kv-cast patch ported to demo-port's release of the backend."""
PORT: Step = reply(fix_answer(old=DECODE_NEXT, new=PORTED))

STORED = ROOT / "playbooks" / "catalog" / "kv-cache-full-pool-cast" / "patches"


def as_blocks(diff: str) -> str:
    """A unified diff as the model's edit blocks: each hunk's old lines (context and removed) as
    SEARCH, its new ones (context and added) as REPLACE."""
    out, path, old, new = [], "", [], []

    def flush() -> None:
        if old or new:
            out.append(edit_block(path, "".join(old), "".join(new)))
        old.clear()
        new.clear()

    for line in diff.splitlines(keepends=True):
        if line.startswith("+++ b/"):
            path = line[6:].strip()
        elif line.startswith(("---", "diff --git")):
            continue
        elif line.startswith("@@"):
            flush()
        else:
            text = line[1:] if line[:1] in " +-" else line
            if line[:1] in " -":
                old.append(text)
            if line[:1] in " +":
                new.append(text)
    flush()
    return "".join(out)


SGLANG_BACKEND = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
SGLANG_PORT = as_blocks((STORED / "sglang-0.5.9.diff").read_text())
"""The stored patch for 0.5.23 ported to 0.5.9: the 0.5.9 patch, which tests/sglang checks."""
SGLANG_WRONG = SGLANG_PORT.replace(
    "return pool.index_select(0, rows).to(dtype)", "return pool[: rows.numel()].to(dtype)"
)
"""Gathers the pool's first n rows, not the batch's: as fast, and wrong (outputs change)."""
assert SGLANG_WRONG != SGLANG_PORT
PORT_RATIONALE = (
    "forward_decode casts the whole FP8 KV pool to BF16 every layer. Port gather-then-cast: plan\n"
    "the wrapper on 0..n-1 and gather then cast only the batch's rows.\n\n"
)
READ_SGLANG: Step = reply(None, call("read_file", path=SGLANG_BACKEND, start_line=280, end_line=320))

SCRIPTS: dict[str, dict[str, list[Step]]] = {
    "scripted-fix": {
        "demo-cast": [READ, reply(fix_answer())],
        "demo-launch": [reply(LAUNCH_FIX)],
        "demo-port": [READ, PORT],
        "sglang-port": [READ_SGLANG, reply(PORT_RATIONALE + SGLANG_PORT)],
    },
    "scripted-learner": {
        "demo-cast": [READ, reply(fix_answer(new=WRONG)), reply(fix_answer(new=WRONG)), reply(fix_answer())],
        "demo-launch": [reply(LAUNCH_TYPO), reply(LAUNCH_TYPO), reply(LAUNCH_FIX)],
        "demo-port": [reply(fix_answer()), PORT],  # the stored patch's lines first: they do not match
        "sglang-port": [  # the stored 0.5.23 patch's lines first: they match nothing in 0.5.9
            reply(PORT_RATIONALE + as_blocks((STORED / "sglang-0.5.23.diff").read_text())),
            reply(PORT_RATIONALE + SGLANG_PORT),
        ],
    },
    "scripted-wrong": {
        **{
            task: [READ, *[reply(fix_answer(new=WRONG)) for _ in range(12)]]
            for task in ("demo-cast", "demo-launch", "demo-port")
        },
        "sglang-port": [reply(PORT_RATIONALE + SGLANG_WRONG) for _ in range(12)],
    },
}
"""Each model's script per task (a task runs as its own `perfloop eval --task`, so each script
starts afresh). On `demo-launch` the code is off limits, and on `demo-port` the code it edits is
written otherwise: there `scripted-wrong`'s patch is refused before any launch, every time."""


def run(name: str, task: str, script: list[Step], out: Path) -> list[Score]:
    """One scripted model on one task, recorded into OUT/NAME (beside its other tasks); its scores."""
    with tempfile.TemporaryDirectory(prefix="perfloop-eval-") as home, ScriptedModel(script) as model:
        env = {**os.environ, "PERFLOOP_HOME": home, "OPENAI_API_KEY": "sk-scripted-not-a-key-0000"}
        cmd = [sys.executable, "-m", "agent.cli", "eval", "proposer", "--model", name, "--task", task]
        cmd += ["--base-url", model.base_url, "--record", str(out / name), "--json"]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{name} {task}: perfloop eval exited {proc.returncode}: {proc.stderr[-2000:]}")
        print(f"{name} {task}: {len(model.requests)} request(s) to the scripted model", file=sys.stderr)
    return [Score.model_validate(s) for s in json.loads(proc.stdout.strip().splitlines()[-1])]


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "eval"
    tasks = [a.removeprefix("--task=") for a in sys.argv[2:] if a.startswith("--task=")]
    names = [a for a in sys.argv[2:] if not a.startswith("--task=")] or list(SCRIPTS)
    for name in names:
        for task in tasks or list(SCRIPTS[name]):
            run(name, task, SCRIPTS[name][task], out)
    scores = [
        Score.model_validate(s)
        for n in names
        for s in json.loads((out / n / "scores.json").read_text())["scores"]
    ]
    order = [t.name for t in TASKS]
    print(markdown(sorted(scores, key=lambda s: (order.index(s.task), names.index(s.model)))))


if __name__ == "__main__":
    main()
