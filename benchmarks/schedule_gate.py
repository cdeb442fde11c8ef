"""The schedule-aware output gate on exact changes and on planted math changes of known size.

Real launches of the demo server, all at once (one GPU, or the CPU): the reference is the demo
with the cast fix; each variant is a tree or launch option that keeps the math (`exact`: a
relaunch of the same tree; the tree without the cast fix, several times slower per step, so
batches form differently; `--num-continuous-decode-steps 4`, which admits requests later) or
changes it by a known amount (`planted`: every logit moved by `eps * cos(1.7 * token_id)`;
the hidden state's features reversed at positions past `--past`, a patch wrong only for long contexts;
optionally the decode-step-fusion playbook's patch). For each of `--sets` correctness sets (the
timing prompts, the random prompts session `bench-i` would draw, and `--long-prompts` long
prompts from `--long-tokens` characters, past `--past`; the batch as the loop's: 3 + the long
ones), the reference takes the set with the batch at once and staggered (the baseline's A/A on outputs, `OutputNoise`) and every variant takes it the same
way and is judged as the loop judges a candidate (agent/decision/gate/schedule.py `judge`).

Prints a table: per variant, sessions refused by the schedule-aware gate and by the old exact
gate (every text, alone and in the batch, equal), the baseline's own moved share, and why. The
goal: no exact variant refused (false rejects), every planted one refused (false accepts 0).

    python benchmarks/schedule_gate.py --device cuda --preset glm5 --layers 32 --sets 20
    .venv/bin/python benchmarks/schedule_gate.py --device cpu --preset cpu --layers 1 --sets 20 --past 600
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.decision.gate.correctness import correctness_prompts  # noqa: E402
from agent.decision.gate.schedule import judge, noise_of  # noqa: E402
from state.config.target import LaunchConfig  # noqa: E402
from state.door.calls import LaunchArgs, ServerArgs  # noqa: E402
from state.measurement.correctness import CorrectnessConfig, OutputsArgs, OutputsResult  # noqa: E402
from tools import bench, server  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from decisions import copy_demo  # noqa: E402
from tolerance_nudge import LOGITS, NUDGED  # noqa: E402

PROMPTS = ["Explain the KV cache in one sentence.", "Write a haiku about GPUs.", "List three prime numbers."]
LAYER = "        w, n = self.layers[layer_id], h.shape[0]\n"
PAST = (
    "        import os\n\n"
    '        past = int(os.environ.get("BENCH_PAST", "0"))\n'
    "        if past and layer_id == 0:  # benchmark: wrong only at positions past `past`\n"
    "            h = torch.where((positions >= past).unsqueeze(-1), h.flip(-1), h)\n" + LAYER
)
FUSION = ROOT / "playbooks" / "catalog" / "decode-step-fusion" / "patches" / "mla_server.diff"


def make_tree(dest: Path, fixed: bool, fusion: bool = False) -> Path:
    """The demo target (with the cast fix if `fixed`, the fusion playbook's patch if `fusion`)
    with the benchmark's two knobs, off unless `BENCH_NUDGE` or `BENCH_PAST` is set."""
    copy_demo(dest, fixed)
    if fusion:
        subprocess.run(["git", "apply", "--recount", str(FUSION)], cwd=dest, check=True)
    model = dest / "mla_server" / "model.py"
    text = model.read_text()
    assert LOGITS in text and (fusion or LAYER in text), "the demo's MLAModel changed: update the benchmark"
    model.write_text(text.replace(LOGITS, NUDGED, 1).replace(LAYER, PAST, 1))  # (fusion: no PAST knob)
    return dest


def variants(a: argparse.Namespace) -> list[dict]:
    """(name, kind, tree, extra flags, env) of every variant."""
    out = [
        {"name": "relaunch", "kind": "exact", "tree": "fixed", "flags": [], "env": {}},
        {"name": "without the cast fix", "kind": "exact", "tree": "unfixed", "flags": [], "env": {}},
        {"name": "--num-continuous-decode-steps 4", "kind": "exact", "tree": "fixed",
         "flags": ["--num-continuous-decode-steps", "4"], "env": {}},
    ]  # fmt: skip
    out += [
        {"name": f"logits moved by {eps:g}", "kind": "planted", "tree": "fixed", "flags": [],
         "env": {"BENCH_NUDGE": str(eps)}}
        for eps in (float(e) for e in a.eps.split(","))
    ]  # fmt: skip
    out.append({"name": f"wrong past position {a.past}", "kind": "planted", "tree": "fixed", "flags": [],
                "env": {"BENCH_PAST": str(a.past)}})  # fmt: skip
    if a.fusion:
        out.append({"name": "decode-step-fusion playbook", "kind": "planted", "tree": "fusion", "flags": [],
                    "env": {}})  # fmt: skip
    return out


def old_exact(ref: OutputsResult, cand: OutputsResult) -> bool:
    """Whether the gate before the schedule-aware one refused: any text, alone or in the batch
    sent at once, unlike the reference's (pure)."""
    return ref.sequential != cand.sequential or ref.concurrent != cand.concurrent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--pool", type=int, default=65536, help="--max-total-tokens of every server")
    p.add_argument("--sets", type=int, default=20)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--random-prompts", type=int, default=2)
    p.add_argument("--concurrent", type=int, default=3)
    p.add_argument("--past", type=int, default=1024)
    p.add_argument("--long-tokens", type=int, default=0, help="first long prompt's characters (0: past + 64)")
    p.add_argument(
        "--long-prompts", type=int, default=3, help="long prompts, 100 characters apart (the demo's 3)"
    )
    p.add_argument("--eps", default="0.05,0.3")
    p.add_argument("--fusion", action="store_true", help="also the decode-step-fusion playbook's patch")
    p.add_argument("--threads", type=int, default=None, help="torch threads per server (cpu)")
    p.add_argument("--out", type=Path, default=None, help="JSON of every session")
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="schedule-gate-"))
    trees = {"fixed": make_tree(tmp / "fixed", True), "unfixed": make_tree(tmp / "unfixed", False)}
    if a.fusion:
        trees["fusion"] = make_tree(tmp / "fusion", True, fusion=True)
    cfg = CorrectnessConfig(random_prompts=a.random_prompts, max_prompt_chars=600, max_tokens=a.max_tokens)
    long_chars = a.long_tokens or a.past + 64
    sets = [correctness_prompts(f"bench-{i}", PROMPTS, cfg) for i in range(a.sets)]
    words = "the quick brown fox jumps over the lazy dog " * ((long_chars + 100 * a.long_prompts) // 44 + 1)
    longs = [words[: long_chars + 100 * k] for k in range(a.long_prompts)]
    sets = [[*s, *(t + f" ({i})" for t in longs)] for i, s in enumerate(sets)]
    n = len(sets[0])
    batch = [
        *range(a.concurrent),
        *range(n - a.long_prompts, n),
    ]  # as the loop's batch: first ones + the long
    base = ["bash", "launch.sh", "--port", "{port}", "--preset", a.preset, "--device", a.device,
            "--layers", str(a.layers), "--max-total-tokens", str(a.pool)]  # fmt: skip
    if a.threads:
        base += ["--threads", str(a.threads)]

    def launch(n: int, tree: str, flags: list[str], env: dict):
        return server.launch(LaunchArgs(
            repo=trees[tree], launch=LaunchConfig(argv=base + flags, env={"PYTHON": "{python}", **env},
                                                  startup_timeout_s=600),
            python=sys.executable, log_path=tmp / f"server-{n}.log", tree_sha256="bench", instrumented=False,
            profile_dir=None, launch_number=n, pid_file=tmp / f"server-{n}.pid"))  # fmt: skip

    def take(h, prompts: list[str]) -> OutputsResult:
        return bench.outputs(OutputsArgs(base_url=h.base_url, model="mla-demo", prompts=prompts,
                                         max_tokens=a.max_tokens, concurrent=len(batch), together=batch,
                                         stagger=True))  # fmt: skip

    vs = variants(a)
    t0 = time.perf_counter()
    # a SIGTERM (timeout, kill) unwinds through `finally`, so every server launched is stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    specs = [("fixed", [], {})] + [(v["tree"], v["flags"], v["env"]) for v in vs]
    handles = []
    try:
        with ThreadPoolExecutor(len(specs)) as pool:
            futures = [pool.submit(launch, n, *spec) for n, spec in enumerate(specs)]
            for f in futures:  # the ones that came up are kept to be stopped, even if one failed
                if f.exception() is None:
                    handles.append(f.result())
        if len(handles) < len(specs):
            raise SystemExit(next(str(f.exception()) for f in futures if f.exception() is not None))
        print(f"{len(handles)} servers up in {time.perf_counter() - t0:.0f} s", flush=True)
        refs = [take(handles[0], s) for s in sets]
        noises = [noise_of(r, batch) for r in refs]

        def run(k: int) -> list[OutputsResult]:
            return [take(handles[k + 1], s) for s in sets]

        with ThreadPoolExecutor(len(vs)) as pool:
            taken = list(pool.map(run, range(len(vs))))
    finally:
        for h in handles:
            server.stop(ServerArgs(server=h, grace_s=5))
    named = [f"prompt {i + 1}" for i in range(len(sets[0]))]
    moved = sum(n.varied for n in noises)
    seen = sum(n.observations for n in noises)
    print(f"\n{a.sets} correctness sets of {len(sets[0])} prompts x {a.max_tokens} tokens ({a.concurrent} + {a.long_prompts} "
          f"long ones from {long_chars} chars in the batch), {a.preset} preset on {a.device}, {a.layers} layer(s); "
          f"the reference's batched texts moved in {moved}/{seen} ({sum(not n.exact for n in noises)} of "
          f"{a.sets} sets not exact); {time.perf_counter() - t0:.0f} s in all\n")  # fmt: skip
    print(
        "| variant | kind | refused (schedule-aware) | refused (old exact gate) | why, first refused or passed |"
    )
    print("|---|---|---|---|---|")
    rows = []
    for v, outs in zip(vs, taken, strict=True):
        judged = [judge(n, r, o, batch, named) for n, r, o in zip(noises, refs, outs, strict=True)]
        refused = sum(j[0] is not None for j in judged)
        old = sum(old_exact(r, o) for r, o in zip(refs, outs, strict=True))
        example = next((j[1] for j in judged if (j[0] is not None) == (v["kind"] == "planted")), judged[0][1])
        print(f"| {v['name']} | {v['kind']} | {refused}/{a.sets} | {old}/{a.sets} | {example} |", flush=True)
        rows.append({**v, "refused": refused, "old_refused": old, "lines": [j[1] for j in judged]})
    if a.out:
        a.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "rows": rows,
                                     "noise": [n.model_dump() for n in noises]}, indent=1))  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
