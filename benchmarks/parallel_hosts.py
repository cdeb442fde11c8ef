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

Each run's record (`--out`) holds the trials' tool calls as (node, tool, start s, duration s), to
see how far they overlapped.

Printed: a markdown table of session wall time and of the trial phase (from the fan-out in
`propose` to the last `join`), median per variant, and the parallel/sequential ratio per pair
(median, min, max).

    PYTHONPATH=. .venv/bin/python benchmarks/parallel_hosts.py --rounds 2 [--proposer llm]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playbooks.engine import CATALOG  # noqa: E402
from tests.e2e.conftest import edited_diff, last_json, make_repo, playbook_variant  # noqa: E402
from tests.llm.conftest import edit_block, fix_answer  # noqa: E402
from tests.llm.fake_openai import ScriptedModel, reply  # noqa: E402
from tools.store.sessions import SessionStore  # noqa: E402

BACKEND = "mla_server/attention/mla_backend.py"
COMMENT = "import torch\n"


def target(path: Path, repo: Path, hosts: list[Path], a: argparse.Namespace) -> Path:
    """The benchmark's target: the demo server on `a.device` with `a.preset`; with `--gpus` each
    host's servers get a GPU of their own (`[hosts.env] CUDA_VISIBLE_DEVICES`)."""
    tables = "".join(
        f'\n[[hosts]]\nname = "h{i}"\nrepo = {json.dumps(str(h))}\n'
        + (f'[hosts.env]\nCUDA_VISIBLE_DEVICES = "{i}"\n' if a.gpus else "")
        for i, h in enumerate(hosts)
    )
    path.write_text(f"""
name = "parallel benchmark"
kind = "mla_server"
repo = {json.dumps(str(repo))}
model = "mla-demo"
[launch]
argv = ["bash", "launch.sh", "--port", "{{port}}", "--preset", "{a.preset}", "--device", "{a.device}"]
env = {{ PYTHON = "{{python}}" }}
startup_timeout_s = 300
[measure]
prompts = ["Explain the KV cache.", "Write a haiku about GPUs."]
max_tokens = 12
repeats = 3
[correctness]
random_prompts = 1
long_prompts = 0
[decide]
looks = 1
{tables}""")
    return path


def cli(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real CLI as `python -m agent.cli` (also where no console script is installed)."""
    full = {**os.environ, "PERFLOOP_HOME": str(home), **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), full.get("PYTHONPATH", "")) if x)
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=3600,
        stdin=subprocess.DEVNULL,
    )


def model_answer(body: dict) -> dict:
    """A round's first conversation gets the fix; the second, shown the first, the comment."""
    if "already proposed for this round" in body["messages"][1]["content"]:
        return reply("A hint for the reader.\n" + edit_block(BACKEND, COMMENT, COMMENT + "\n# a hint\n"))
    return reply(fix_answer())


def one_session(
    work: Path, parallel: int, source: tuple[str, ...], env: dict[str, str], a: argparse.Namespace
) -> dict:
    """Run one session in fresh checkouts; its wall time and trial phase in seconds."""
    repo = make_repo(work / "engine")
    hosts = [make_repo(work / f"h{i}" / "engine") for i in range(2)]
    toml = target(work / "t.toml", repo, hosts, a)
    home = work / "home"
    t0 = time.monotonic()
    args = (
        "run",
        str(toml),
        "--approve",
        "auto",
        "--json",
        *source,
        "--max-iterations",
        "1",
        "--parallel",
        str(parallel),
    )
    proc = cli(home, *args, env=env)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"session failed (--parallel {parallel}): {proc.stderr[-2000:]}")
    s = last_json(proc)
    shown = last_json(cli(home, "show", s["session"], "--json"))
    at = {t["node"]: datetime.fromisoformat(t["at"]) for t in shown["transitions"] if t["node"] == "propose"}
    joins = [datetime.fromisoformat(t["at"]) for t in shown["transitions"] if t["node"] == "join"]
    phase = (joins[-1] - at["propose"]).total_seconds()
    calls = SessionStore.open(home).tool_calls(s["session"])
    t0 = min(c.started_at for c in calls)
    timeline = [
        (c.node, c.name, round((c.started_at - t0).total_seconds(), 2), round(c.duration_s, 2))
        for c in calls
        if c.node.startswith("trial@")
    ]
    return {
        "timeline": timeline,
        "session": s["session"],
        "speedup": s["speedup"],
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
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--preset", choices=("cpu", "glm5"), default="cpu")
    ap.add_argument("--gpus", action="store_true", help="host i's servers on GPU i (CUDA_VISIBLE_DEVICES)")
    ap.add_argument("--only", type=int, choices=(1, 2), help="run only this --parallel value")
    ap.add_argument("--builtin", action="append", help="load only this built-in playbook (repeatable)")
    ap.add_argument(
        "--tables-from", type=Path, nargs="+", help="print the table of saved --out files, run nothing"
    )
    a = ap.parse_args()
    if a.tables_from:
        report([run for f in a.tables_from for run in json.loads(f.read_text())])
        return
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
            if a.builtin:  # only these of the catalog (as copies named `only-ID`), e.g. to leave
                for book in a.builtin:  # out a candidate whose server compiles kernels at start
                    copy = books / f"only-{book}"
                    shutil.copytree(CATALOG / book, copy)
                    toml = copy / "playbook.toml"
                    toml.write_text(toml.read_text().replace(f'id = "{book}"', f'id = "only-{book}"', 1))
                source += ("--no-builtin-playbooks",)
        for r in range(a.rounds):
            order = (2, 1) if r % 2 == 0 else (1, 2)
            for p in [x for x in order if a.only in (None, x)]:
                run = one_session(root / f"r{r}-p{p}", p, source, env, a)
                runs.append(run)
                print(
                    f"round {r + 1} --parallel {p}: {run['wall_s']:.0f} s (trials {run['trials_s']:.0f} s)",
                    file=sys.stderr,
                )
    if a.out:
        a.out.write_text(json.dumps(runs, indent=2))
    report(runs)


def report(runs: list[dict]) -> None:
    """The table, the parallel/sequential ratios per pair (in run order), what was accepted."""
    by = {p: [x for x in runs if x["parallel"] == p] for p in (1, 2)}
    print("| variant | sessions | session wall s (median) | trial phase s (median) |")
    print("|---|---|---|---|")
    for p, name in ((1, "--parallel 1 (one after another)"), (2, "--parallel 2 (at once)")):
        if xs := by[p]:
            print(
                f"| {name} | {len(xs)} | {statistics.median(x['wall_s'] for x in xs):.0f} | "
                f"{statistics.median(x['trials_s'] for x in xs):.0f} |"
            )
    for key, label in (("wall_s", "session wall time"), ("trials_s", "trial phase")):
        ratios = [b[key] / s[key] for b, s in zip(by[2], by[1], strict=False)]
        if ratios:
            print(
                f"\nparallel / sequential, {label}: {statistics.median(ratios):.2f}x "
                f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {len(ratios)} pairs)"
            )
    accepted = {tuple(x["accepted"]) for x in runs}
    print(f"\naccepted in every session: {sorted(accepted)}")


if __name__ == "__main__":
    main()
