"""Two candidates on two hosts: tried at once (`--parallel 2`) against one after another (`--parallel 1`).

The same session, run through the real CLI: the demo target, two candidate patches (the built-in
gather-then-cast fix and a patch that only adds a comment), two `[[hosts]]` with their own
checkouts. Both hosts are local checkouts on this machine (the SSH path is the same door with an
executor; tests/ssh/test_parallel_hosts.py runs it over two real sshd daemons): on a 2-core
machine two CPU demo servers measured at once compete for the same cores, so most of the gain
comes from overlapping the launches and the waits, not from twice the compute, and the measured
TPOTs of parallel trials are noisier. Variants alternate (`--rounds` pairs) so a change in the
machine's load hits both.

With `--proposer llm` the two candidates are model-written instead: a scripted OpenAI-compatible
server on 127.0.0.1 (tests/llm/fake_openai.py, the real openai client) answers the first
conversation of a round with the gather-then-cast fix and the second, which is shown the first,
with the comment-only patch; no playbook is loaded.

Printed: a markdown table of session wall time and of the trial phase (from the fan-out in
`propose` to the last `join`), median per variant, and the parallel/sequential ratio per pair
(median, min, max).

    PYTHONPATH=. .venv/bin/python benchmarks/parallel_hosts.py --rounds 2 [--proposer llm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import edited_diff, last_json, make_repo, perfloop, playbook_variant  # noqa: E402
from tests.llm.conftest import edit_block, fix_answer  # noqa: E402
from tests.llm.fake_openai import ScriptedModel, reply  # noqa: E402

BACKEND = "mla_server/attention/mla_backend.py"
COMMENT = "import torch\n"


def target(path: Path, repo: Path, hosts: list[Path]) -> Path:
    tables = "".join(
        f'\n[[hosts]]\nname = "h{i}"\nrepo = {json.dumps(str(h))}\n' for i, h in enumerate(hosts)
    )
    path.write_text(f"""
name = "parallel benchmark"
kind = "mla_server"
repo = {json.dumps(str(repo))}
model = "mla-demo"
[launch]
argv = ["bash", "launch.sh", "--port", "{{port}}", "--preset", "cpu"]
env = {{ PYTHON = "{{python}}" }}
startup_timeout_s = 180
[measure]
prompts = ["Explain the KV cache.", "Write a haiku about GPUs."]
max_tokens = 12
repeats = 3
[correctness]
random_prompts = 1
[decide]
looks = 1
{tables}""")
    return path


def model_answer(body: dict) -> dict:
    """A round's first conversation gets the fix; the second, shown the first, the comment."""
    if "already proposed for this round" in body["messages"][1]["content"]:
        return reply("A hint for the reader.\n" + edit_block(BACKEND, COMMENT, COMMENT + "\n# a hint\n"))
    return reply(fix_answer())


def one_session(work: Path, parallel: int, source: tuple[str, ...], env: dict[str, str]) -> dict:
    """Run one session in fresh checkouts; its wall time and trial phase in seconds."""
    repo = make_repo(work / "engine")
    hosts = [make_repo(work / f"h{i}" / "engine") for i in range(2)]
    toml = target(work / "t.toml", repo, hosts)
    home = work / "home"
    t0 = time.monotonic()
    args = ("run", str(toml), "--json", *source, "--max-iterations", "1", "--parallel", str(parallel))
    proc = perfloop(home, *args, timeout=1800, env=env)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"session failed (--parallel {parallel}): {proc.stderr[-2000:]}")
    s = last_json(proc)
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    at = {t["node"]: datetime.fromisoformat(t["at"]) for t in shown["transitions"] if t["node"] == "propose"}
    joins = [datetime.fromisoformat(t["at"]) for t in shown["transitions"] if t["node"] == "join"]
    phase = (joins[-1] - at["propose"]).total_seconds()
    return {
        "parallel": parallel,
        "wall_s": wall,
        "trials_s": phase,
        "accepted": s["accepted"],
        "trials": s["trials"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="pairs of sessions (parallel, sequential)")
    ap.add_argument("--out", type=Path, help="write every number here (JSON)")
    ap.add_argument(
        "--proposer", choices=("playbook", "llm"), default="playbook", help="who writes the candidates"
    )
    a = ap.parse_args()
    runs: list[dict] = []
    with (
        tempfile.TemporaryDirectory(prefix="perfloop-parallel-bench-") as tmp,
        ScriptedModel([model_answer] * 64) as model,
    ):
        root = Path(tmp)
        env: dict[str, str] = {}
        if a.proposer == "llm":
            source = ("--proposer", "llm", "--model", "scripted-coder", "--no-builtin-playbooks")
            env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "sk-benchmark"}
        else:
            scratch = make_repo(root / "scratch")
            books = root / "books"
            noop = edited_diff(scratch, root, {BACKEND: [(COMMENT, COMMENT + "\n# a comment\n")]})
            playbook_variant(books, "noop-comment", 0.5, noop)
            source = ("--playbooks", str(books))
        for r in range(a.rounds):
            order = (2, 1) if r % 2 == 0 else (1, 2)
            for p in order:
                run = one_session(root / f"r{r}-p{p}", p, source, env)
                runs.append(run)
                print(
                    f"round {r + 1} --parallel {p}: {run['wall_s']:.0f} s (trials {run['trials_s']:.0f} s)",
                    file=sys.stderr,
                )
    by = {p: [x for x in runs if x["parallel"] == p] for p in (1, 2)}
    print("| variant | sessions | session wall s (median) | trial phase s (median) |")
    print("|---|---|---|---|")
    for p, name in ((1, "--parallel 1 (one after another)"), (2, "--parallel 2 (at once)")):
        xs = by[p]
        print(
            f"| {name} | {len(xs)} | {statistics.median(x['wall_s'] for x in xs):.0f} | "
            f"{statistics.median(x['trials_s'] for x in xs):.0f} |"
        )
    for key, label in (("wall_s", "session wall time"), ("trials_s", "trial phase")):
        ratios = [b[key] / s[key] for b, s in zip(by[2], by[1], strict=True)]
        print(
            f"\nparallel / sequential, {label}: {statistics.median(ratios):.2f}x "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {len(ratios)} pairs)"
        )
    accepted = {tuple(x["accepted"]) for x in runs}
    print(f"\naccepted in every session: {sorted(accepted)}")
    if a.out:
        a.out.write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
