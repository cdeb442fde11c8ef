"""Launch options of the demo server at concurrency: perfloop's TPE search against a grid (like
vLLM's benchmarks/auto_tune: every point in order, one measurement each) at the same launch budget.

Each launch is measured in windows: `--concurrency` streamed requests sent at once (one window =
one unit of evidence, since its requests share decode batches), after a warm-up window. The
objective is the median window's output throughput (tokens/s); TPOT p50/p99 over the requests is
reported too. The default launch is measured first; the best config of each method is compared
with it: the ratio of median window throughputs with a seeded bootstrap 95% CI over windows.
The search uses perfloop's knob model and optuna TPE as `--proposer search` does (seeded; the
first trial sets the knob the diagnosis implicates on this target, the KV pool's size).

    python benchmarks/search_vs_grid.py --preset glm5 --device cuda --concurrency 8 --budget 4 --out DIR
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decisions import copy_demo

from agent.proposer.tuning.knobs import describe_config, with_config
from agent.proposer.tuning.search import distribution
from state.config.target import LaunchConfig
from state.door.calls import LaunchArgs, ServerArgs
from state.proposers.search import Knob, KnobValue
from tools import server
from tools.client.stream import chat_body, stream_completion

KNOBS = [
    Knob(name="--max-total-tokens", type="choice", choices=[16384, 65536, 495552], first=16384),
    Knob(name="--max-running-requests", type="choice", choices=[2, 4, 8, 16]),
    Knob(name="--cuda-graph-max-bs", type="choice", choices=[1, 2, 4, 8]),
    Knob(name="--num-continuous-decode-steps", type="choice", choices=[1, 2, 4, 8]),
]
PROMPTS = ["Explain the KV cache.", "Write a haiku about GPUs.", "List three prime numbers.", "Why batch?"]


class Runner:
    """Launch the demo with a config and measure it in windows."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a, self.n = a, 0
        self.tree = copy_demo(Path(tempfile.mkdtemp()) / "mla_server", fixed=False)
        self.base = ["bash", "launch.sh", "--port", "{port}", "--preset", a.preset, "--device", a.device]
        if a.cpu_pool is not None:  # the cpu preset's pool choices are smaller
            KNOBS[0] = Knob(name="--max-total-tokens", type="choice", choices=a.cpu_pool, first=a.cpu_pool[0])

    def window(self, url: str) -> dict:
        body = [
            chat_body("mla-demo", PROMPTS[i % len(PROMPTS)], self.a.max_tokens)
            for i in range(self.a.concurrency)
        ]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(self.a.concurrency) as pool:
            done = list(pool.map(lambda b: stream_completion(url, b, 600)[0], body))
        wall = time.perf_counter() - t0
        tpot = [(t[-1] - t[0]) / (len(t) - 1) * 1000 for t in done if len(t) > 1]
        return {"tokens_per_s": sum(len(t) for t in done) / wall, "tpot_ms": tpot}

    def measure(self, config: dict[str, KnobValue]) -> dict:
        self.n += 1
        argv = with_config(self.base, KNOBS, config)
        logs = Path(self.a.out) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        h = server.launch(
            LaunchArgs(
                repo=self.tree,
                launch=LaunchConfig(argv=argv, env={"PYTHON": "{python}"}, startup_timeout_s=600),
                python=sys.executable,
                log_path=logs / f"server-{self.n}.log",
                tree_sha256="bench",
                instrumented=False,
                profile_dir=None,
                launch_number=self.n,
                pid_file=logs / f"server-{self.n}.pid",
            )
        )
        try:
            self.window(h.base_url)  # warm-up, discarded
            windows = [self.window(h.base_url) for _ in range(self.a.windows)]
        except Exception as exc:  # a config that fails counts as a failed trial
            return {"config": config, "failed": str(exc)[:200], "launch": self.n}
        finally:
            server.stop(ServerArgs(server=h, grace_s=10))
        tput = [w["tokens_per_s"] for w in windows]
        tpot = sorted(x for w in windows for x in w["tpot_ms"])
        result = {
            "config": config,
            "launch": self.n,
            "windows_tokens_per_s": tput,
            "tokens_per_s": statistics.median(tput),
            "tpot_ms_p50": tpot[len(tpot) // 2],
            "tpot_ms_p99": tpot[min(len(tpot) - 1, int(len(tpot) * 0.99))],
        }
        with open(Path(self.a.out) / "trials.jsonl", "a") as f:  # kept if the run is cut short
            f.write(json.dumps(result) + "\n")
        return result


def grid(r: Runner, budget: int) -> list[dict]:
    """auto_tune's way: the grid's points in order, one measurement each, until the budget."""
    names = [k.name for k in KNOBS]
    points = itertools.product(*(k.choices for k in KNOBS))
    return [r.measure(dict(zip(names, p, strict=True))) for p in itertools.islice(points, budget)]


def search(r: Runner, budget: int, seed: int) -> list[dict]:
    """perfloop's search: the implicated knob first, then TPE on the history (seeded)."""
    dists = {k.name: distribution(k) for k in KNOBS}
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=2)
    )
    study.enqueue_trial({k.name: k.first for k in KNOBS if k.first is not None})
    out = []
    for _ in range(budget):
        trial = study.ask(dists)
        result = r.measure(trial.params)
        out.append(result)
        study.tell(
            trial,
            result.get("tokens_per_s"),
            state=None if "failed" not in result else optuna.trial.TrialState.FAIL,
        )
    return out


def versus(best: dict, default: dict, seed: int) -> dict:
    """Throughput ratio best / default, median of windows, with a bootstrap 95% CI."""
    rng = np.random.default_rng(seed)
    b, d = np.array(best["windows_tokens_per_s"]), np.array(default["windows_tokens_per_s"])
    boots = [np.median(rng.choice(b, b.size)) / np.median(rng.choice(d, d.size)) for _ in range(2000)]
    return {
        "ratio": float(np.median(b) / np.median(d)),
        "ci95": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="glm5")
    p.add_argument("--device", default="cuda")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--budget", type=int, default=4, help="launches per method (the default's launch apart)")
    p.add_argument("--windows", type=int, default=3, help="measured windows per launch")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu-pool", type=int, nargs="+", default=None, help="pool choices for the cpu preset")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    # `timeout` sends SIGTERM: exit through the `finally`s that stop the servers (a SIGTERM's
    # default action left a 16 GB server on the H200 after a cut-short run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    r = Runner(a)
    try:
        default = r.measure({})
        runs = {"grid": grid(r, a.budget), "search": search(r, a.budget, a.seed)}
    finally:  # also a server cut short in its start-up, which `measure`'s own `finally` misses
        for pid_file in (Path(a.out) / "logs").glob("server-*.pid"):
            server.stop_pid_file(pid_file, r.tree, 5)
    report: dict = {"args": vars(a), "default": default, "runs": runs, "best": {}}
    rows = [
        "| method | launches | best config | tokens/s | TPOT p50 / p99 ms | vs default [95% CI] |",
        "|---|---|---|---|---|---|",
    ]
    rows.append(
        f"| default | 1 | defaults | {default['tokens_per_s']:.1f} | {default['tpot_ms_p50']:.1f} / {default['tpot_ms_p99']:.1f} | 1 |"
    )
    for method, results in runs.items():
        ok = [x for x in results if "failed" not in x]
        best = max(ok, key=lambda x: x["tokens_per_s"]) if ok else None
        if best is None:
            rows.append(f"| {method} | {len(results)} | all failed | - | - | - |")
            continue
        v = versus(best, default, a.seed)
        report["best"][method] = {**best, **v}
        rows.append(
            f"| {method} | {len(results)} | {describe_config(best['config'], KNOBS)} | {best['tokens_per_s']:.1f} | "
            f"{best['tpot_ms_p50']:.1f} / {best['tpot_ms_p99']:.1f} | {v['ratio']:.2f}x [{v['ci95'][0]:.2f}, {v['ci95'][1]:.2f}] |"
        )
    Path(a.out, "search_vs_grid.json").write_text(json.dumps(report, indent=1))
    Path(a.out, "search_vs_grid.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
