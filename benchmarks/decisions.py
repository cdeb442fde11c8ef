"""How often the decision rule is fooled, on real launches of the demo server.

A copy of the demo target gets two benchmark-only changes: `ModelRunner.forward_decode` sleeps
`BENCH_SLOWDOWN x` its own compute time after each step, so an arm launched with
`BENCH_SLOWDOWN=0.3` really does 1.3x the decode time; and `ModelRunner.run_layers` runs
`BENCH_EXTRA_LAYERS` more layer passes (projections and experts, attention's cache write left out
so outputs stay the same) whose result is discarded: real device work, captured in the CUDA graphs
(the sleep adds none under graphs: it runs on the host at capture). On the glm5 preset (78 layers)
N extra passes are ~N/78 more layer work (`--detect-layers N:PAIRS`). Then, with perfloop's own client and rule
(agent/decision/stats/rule.py), exactly as the loop does it:

1. calibration: `--calibration` launches of the unchanged tree, kept as A/A samples; the launch
   noise (agent/decision/stats/noise.py) comes from them, as `perfloop calibrate` would give;
2. A/A: `--aa-pairs` pairs of two fresh launches of the same tree; the reference arm measured with
   the full budget (repeats x looks per prompt), the candidate look by look on its launch;
3. detection: for each `--detect F:N`, N pairs whose reference arm runs `BENCH_SLOWDOWN = F - 1`
   and whose candidate runs the unchanged tree (a true F x speedup).

`--arms sequential` (the default) measures each arm on its own launch, one after the other;
`--arms alternating` launches the two trees in turn, C R | R C | ..., one launch each at a time,
and judges on the launches' locations (agent/decision/stats/replicates.py: the random-effects
t-interval, launches per arm planned from each launch noise, a look after each round);
`--arms cross-host` runs two hosts at once on this machine, the second `--host-bias` slower for
whichever tree it runs, the trees swapping hosts every round (agent/decision/stats/crossover.py: each
host's reference-minus-candidate averaged, so the bias cancels; each verdict also gives the
speedup with the hosts ignored, which the bias leaks into);
`--arms blocks` judges as paired blocks do (agent/decision/stats/blocks.py: C R | R C | ..., each
block's difference the unit, the noise pooled over the calibration and the earlier sessions' blocks
(`calibrated`) or over the session's own blocks alone (`default`: a first trial on a new host));
`--arms interleaved` launches both arms at once and alternates requests between them
(`bench.measure_pair`), calibrates from interleaved A/A pairs, and confirms an acceptance below
`confirm_below` on a fresh pair of launches, as the loop does with `[decide] arms = "interleaved"`.

The tree has the cast fix applied (`--unfixed` keeps the slow full-pool cast), so a request takes
milliseconds and launches dominate the cost.

Each scenario is judged twice, with the calibrated launch noise and with the conservative default
(`--variants` picks); a table of verdicts goes to stdout (markdown) and all numbers to `--out`
(JSON). With `--workers N --gpus 0,1,...` each worker thread launches its servers on its own GPU
(one session at a time per GPU); the table's session minutes are the sessions' own, summed.

    .venv/bin/python benchmarks/decisions.py --aa-pairs 20 --detect 1.1:20 --detect 1.3:20
    .venv/bin/python benchmarks/decisions.py --arms alternating --preset glm5 --device cuda \
        --aa-pairs 10 --detect-layers 4:10
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shlex
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.decision.stats import blocks  # noqa: E402
from agent.decision.stats.crossover import (  # noqa: E402
    crossover_look,
    first_look,
    looks_of,
    naive_shift,
    other,
    rounds_planned,
    session_arm,
)
from agent.decision.stats.noise import launch_noise, pair_noise  # noqa: E402
from agent.decision.stats.replicates import alternating_look, launches_per_arm, prior_of  # noqa: E402
from agent.decision.stats.rule import (  # noqa: E402
    arm_location,
    by_prompt,
    combined_shift,
    look,
    needs_confirmation,
    replicated,
)
from state.config.target import LaunchConfig, MeasureConfig  # noqa: E402
from state.door.calls import LaunchArgs, MeasureArgs, PairArgs, ServerArgs  # noqa: E402
from state.measurement.aa import AASample  # noqa: E402
from state.measurement.decision import DecisionConfig, LaunchNoise  # noqa: E402
from tools import server  # noqa: E402
from tools.bench import measure_pair, measure_with_client  # noqa: E402

DEMO = ROOT / "examples" / "targets" / "mla_server"
PROMPTS = ["Explain the KV cache in one sentence.", "Write a haiku about GPUs.", "List three prime numbers."]
WRAPPER = '''
    def forward_decode(self, batch):
        """Benchmark copy: the step, then a sleep of BENCH_SLOWDOWN x its compute time."""
        import os as _os
        import time as _time

        t0 = _time.perf_counter()
        out = self._forward_decode_unslowed(batch)
        slow = float(_os.environ.get("BENCH_SLOWDOWN", "0"))
        if slow > 0:
            _time.sleep((_time.perf_counter() - t0) * slow)
        return out
'''

EXTRA = '''
    def run_layers(self, h, positions, attend, decode: bool = False):
        """Benchmark copy: the layers, then BENCH_EXTRA_LAYERS passes whose result is discarded."""
        import os as _os

        out = self._run_layers_unextended(h, positions, attend, decode)
        for i in range(int(_os.environ.get("BENCH_EXTRA_LAYERS", "0"))):
            w = self.model.layers[i % self.cfg.layers]
            self.model.layer_forward(i % self.cfg.layers, out, positions, _no_cache(w))
        return out
'''
NO_CACHE = '''

def _no_cache(w):
    """An attention stand-in that writes no cache row: the query's latent part as its output."""
    return lambda q, k, layer_id: q[..., :512]
'''


FIX = [
    (
        "k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)",
        "k_buffer = self.kv_pool.get_key_buffer(layer_id)",
    ),
    ("k_buffer[kv_indices], causal=False)", "k_buffer[kv_indices].to(q.dtype), causal=False)"),
]


def copy_demo(dest: Path, fixed: bool) -> Path:
    """A copy of the demo target at `dest`, with the cast fix applied if `fixed` (short steps)."""
    shutil.copytree(DEMO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    if fixed:
        backend = dest / "mla_server" / "attention" / "mla_backend.py"
        text = backend.read_text()
        for old, new in FIX:
            assert old in text, "the demo's attention backend changed: update the benchmark"
            text = text.replace(old, new, 1)
        backend.write_text(text)
    return dest


def make_tree(dest: Path, fixed: bool) -> Path:
    """The demo target with the slowdown knob (and, if `fixed`, the cast fix)."""
    copy_demo(dest, fixed)
    runner = dest / "mla_server" / "model_runner.py"
    text = runner.read_text()
    old = "    def forward_decode(self, batch):\n"
    assert old in text, "the demo's ModelRunner.forward_decode changed: update the benchmark"
    text = text.replace(old, WRAPPER + "\n    def _forward_decode_unslowed(self, batch):\n", 1)
    old = "    def run_layers(self, h, positions, attend, decode: bool = False):\n"
    assert old in text, "the demo's ModelRunner.run_layers changed: update the benchmark"
    text = text.replace(
        old,
        EXTRA + "\n    def _run_layers_unextended(self, h, positions, attend, decode: bool = False):\n",
        1,
    )
    runner.write_text(text + NO_CACHE)
    return dest


class Bench:
    """Launch-and-measure helpers over one tree."""

    def __init__(self, tree: Path, args: argparse.Namespace) -> None:
        self.tree, self.args, self.counter = tree, args, itertools.count(1)
        self.t0 = time.time()
        self.launches: list[tuple[int, float]] = []  # (thread, start-up s: process start to ready)
        self.history: list[list[float]] = []  # paired blocks: each finished session's d / sqrt(2)
        self.lock = threading.Lock()
        self.gpus = [g for g in args.gpus.split(",") if g]  # each worker thread its own GPU
        self.gpu_of: dict[int, str] = {}
        self.logs = Path(tempfile.mkdtemp(prefix="decisions-logs-"))
        argv = ["bash", "launch.sh", "--port", "{port}", "--preset", args.preset, "--device", args.device]
        if args.threads:
            argv += ["--threads", str(args.threads)]
        self.argv = argv + shlex.split(args.server_args)  # e.g. a smaller geometry of a preset
        self.cfg = DecisionConfig(
            looks=args.looks,
            arms="alternating" if args.arms == "blocks" else args.arms,
            max_launches_per_arm=args.max_launches_per_arm,
            keep_power=args.keep_power,
        )

    def launch(self, slowdown: float | tuple[float, int]):
        """A launch of the tree, slowed by `slowdown` (a sleep factor, or (factor, extra layers))."""
        n = next(self.counter)
        sleep, extra = slowdown if isinstance(slowdown, tuple) else (slowdown, 0)
        env = {"PYTHON": "{python}", "BENCH_SLOWDOWN": str(sleep), "BENCH_EXTRA_LAYERS": str(extra)}
        if self.gpus:
            with self.lock:  # the first launch of a worker thread picks the next GPU
                me = threading.get_ident()
                gpu = self.gpu_of.setdefault(me, self.gpus[len(self.gpu_of) % len(self.gpus)])
            env["CUDA_VISIBLE_DEVICES"] = gpu
        t0 = time.time()
        handle = server.launch(
            LaunchArgs(
                repo=self.tree,
                launch=LaunchConfig(argv=self.argv, env=env, startup_timeout_s=300),
                python=sys.executable,
                log_path=self.logs / f"server-{n}.log",
                tree_sha256="bench",
                instrumented=False,
                profile_dir=None,
                launch_number=n,
                pid_file=self.logs / f"server-{n}.pid",
            )
        )
        self.launches.append((threading.get_ident(), time.time() - t0))
        return handle

    def measure(self, handle, repeats: int, warmups: int):
        cfg = MeasureConfig(
            prompts=PROMPTS, max_tokens=self.args.max_tokens, repeats=repeats, warmup_requests=warmups
        )
        args = MeasureArgs(base_url=handle.base_url, model="mla-demo", config=cfg, label="b", tree_sha256="x")
        return by_prompt(measure_with_client(args).requests, len(PROMPTS))

    def arm(self, slowdown: float | tuple[float, int], repeats: int):
        h = self.launch(slowdown)
        try:
            return self.measure(h, repeats, 1)
        finally:
            server.stop(ServerArgs(server=h, grace_s=5))

    def measure_both(self, ref, cand, repeats: int, warmups: int):
        """Both servers at once, requests alternating (perfloop's `bench.measure_pair`)."""
        cfg = MeasureConfig(
            prompts=PROMPTS, max_tokens=self.args.max_tokens, repeats=repeats, warmup_requests=warmups
        )
        args = [
            MeasureArgs(base_url=h.base_url, model="mla-demo", config=cfg, label="b", tree_sha256="x")
            for h in (ref, cand)
        ]
        out = measure_pair(PairArgs(reference=args[0], candidate=args[1]))
        return by_prompt(out.reference.requests, len(PROMPTS)), by_prompt(
            out.candidate.requests, len(PROMPTS)
        )

    def aa_pair(self, repeats: int) -> float:
        """Interleaved A/A: two launches of the same tree measured together; their shift."""
        a, b = self.launch(0.0), self.launch(0.0)
        try:
            return combined_shift(*self.measure_both(a, b, repeats, 1))
        finally:
            for h in (a, b):
                server.stop(ServerArgs(server=h, grace_s=5))

    def looks_interleaved(self, ref_slowdown: float, noises: dict[str, LaunchNoise]) -> dict:
        """One pair of launches (reference slowed by `ref_slowdown`), measured together look by
        look with requests alternating; the deciding look per launch-noise variant."""
        ref_h, cand_h = self.launch(ref_slowdown), self.launch(0.0)
        out: dict = {}
        try:
            ref: list = []
            cand: list = []
            undecided = set(noises)
            for k in range(1, self.cfg.looks + 1):
                r, c = self.measure_both(ref_h, cand_h, self.args.repeats, 1 if k == 1 else 0)
                ref = r if k == 1 else [np.concatenate(x) for x in zip(ref, r, strict=True)]
                cand = c if k == 1 else [np.concatenate(x) for x in zip(cand, c, strict=True)]
                for name in sorted(undecided):
                    lk = look(ref, cand, noises[name], self.cfg, k)
                    if lk.verdict != "undecided":
                        out[name] = lk
                        undecided.discard(name)
                if not undecided:
                    break
        finally:
            for h in (ref_h, cand_h):
                server.stop(ServerArgs(server=h, grace_s=5))
        return out

    def pair_interleaved(self, ref_slowdown: float, noises: dict[str, LaunchNoise]) -> dict:
        """As the loop judges with interleaved arms: a pair of launches, and an acceptance below
        `confirm_below` confirmed on a fresh pair (agent/decision/stats/rule.py `replicated`)."""
        first = self.looks_interleaved(ref_slowdown, noises)
        confirm = {k: noises[k] for k, lk in first.items() if needs_confirmation(lk, self.cfg)}
        second = self.looks_interleaved(ref_slowdown, confirm) if confirm else {}
        out = {}
        for name, lk in first.items():
            row = lk.model_dump() | {"launches": 4 if name in second else 2}
            if name in second:
                row |= {"first": lk.verdict, "second": second[name].model_dump()}
                row["verdict"] = replicated(lk.verdict, second[name].verdict)
            out[name] = row
        return out

    def past_deadline(self) -> bool:
        """Whether `--deadline-s` has passed: no new session or round starts after it."""
        return bool(self.args.deadline_s) and time.time() - self.t0 > self.args.deadline_s

    def pair_alternating(self, ref_slowdown, noises: dict[str, LaunchNoise]) -> dict:
        """As the loop judges with alternating arms: the trees launched in turn, C R | R C | ...,
        each launch measured with the full budget and reduced to its location; per launch-noise
        variant its own plan of launches per arm, a look after each round from the second. A
        session the deadline cuts before its verdict returns {} (not counted)."""
        plans = {name: launches_per_arm(n, self.cfg) for name, n in noises.items()}
        budget = self.args.repeats * self.cfg.looks
        locs: dict[str, list[float]] = {"ref": [], "cand": []}
        out: dict = {}
        for r in range(1, max(plans.values()) + 1):
            if self.past_deadline():
                return {}
            for arm in ("cand", "ref") if r % 2 else ("ref", "cand"):
                locs[arm].append(arm_location(self.arm(ref_slowdown if arm == "ref" else 0.0, budget)))
            for name in sorted(set(noises) - set(out)):
                if r >= 2 and r <= plans[name]:
                    lk, _ = alternating_look(
                        locs["ref"], locs["cand"], self.cfg, r - 1, plans[name] - 1, prior_of(noises[name])
                    )
                    if lk.verdict != "undecided":
                        out[name] = lk.model_dump() | {"launches": 2 * r}
            if len(out) == len(noises):
                break
        return out

    def pair_blocks(self, ref_slowdown, noises: dict[str, LaunchNoise]) -> dict:
        """As the loop judges with paired blocks (agent/decision/stats/blocks.py): C R | R C | ...,
        each launch measured with `repeats` requests per prompt, a block's difference the unit.
        Variant `calibrated`: the pool holds the calibration launches and every earlier session's
        blocks of this run, as a session on a host with history has; `default`: nothing but the
        session's own blocks, as a first trial on a new host. Each variant plans its own blocks
        and pre-registers its looks; {} for a session the deadline cuts."""
        with self.lock:
            history = [list(h) for h in self.history]
        pools = {
            "calibrated": blocks.pool_of(history, noises["calibrated"], self.cfg),
            "default": blocks.pool_of([], None, self.cfg),
        }
        pools = {name: p for name, p in pools.items() if name in noises}
        plans = {name: blocks.plan_blocks(p, self.cfg, 0.0, 0.0).blocks for name, p in pools.items()}
        ds: list[float] = []
        out: dict = {}
        for b in range(1, max(plans.values()) + 1):
            if self.past_deadline():
                return {}
            loc = {}
            for arm in ("cand", "ref") if b % 2 else ("ref", "cand"):
                loc[arm] = arm_location(self.arm(ref_slowdown if arm == "ref" else 0.0, self.args.repeats))
            ds.append(loc["ref"] - loc["cand"])
            for name in sorted(set(pools) - set(out)):
                pool, k = pools[name], plans[name]
                first = blocks.first_look(pool)
                if first <= b <= k:
                    lk, _ = blocks.block_look(
                        ds, pool, self.cfg, b - first + 1, blocks.looks_planned(pool, k)
                    )
                    if lk.verdict != "undecided":
                        out[name] = lk.model_dump() | {"launches": 2 * b}
            if len(out) == len(pools):
                break
        with self.lock:
            self.history.append([d / math.sqrt(2.0) for d in ds])
        return out

    def pair_cross_host(self, ref_slowdown, noises: dict[str, LaunchNoise]) -> dict:
        """As the loop judges with cross-host arms (agent/decision/stats/crossover.py): two hosts at
        once, here and `there`, a machine `--host-bias` slower for whichever tree it runs (its
        launches sleep that much longer per step); round r the candidate here and the reference
        there (odd r), swapped (even r); per launch-noise variant its own plan of rounds, a look
        after each round once there are df. Each verdict also carries `naive`: the speedup with
        the hosts ignored (every launch of a tree pooled), which the host's bias leaks into."""
        plans = {name: rounds_planned(n, self.cfg) for name, n in noises.items()}
        budget, bias = self.args.repeats * self.cfg.looks, self.args.host_bias
        cells: dict = {}
        out: dict = {}
        with ThreadPoolExecutor(2) as two:  # closed on the deadline's return too
            for r in range(1, max(plans.values()) + 1):
                if self.past_deadline():
                    return {}
                jobs = []
                for host, arm in (("here", session_arm(r)), ("there", other(session_arm(r)))):
                    knob = ref_slowdown if arm == "reference" else 0.0
                    if host == "there":
                        knob = biased(knob, bias)
                    jobs.append(((host, arm), knob))
                locs = two.map(lambda job: arm_location(self.arm(job[1], budget)), jobs)
                for (cell, _), loc in zip(jobs, locs, strict=True):
                    cells.setdefault(cell, []).append(loc)
                for name in sorted(set(noises) - set(out)):
                    prior = prior_of(noises[name])
                    first = first_look(prior[1])
                    if first <= r <= plans[name]:
                        of = looks_of(plans[name], prior[1])
                        lk, _ = crossover_look(cells, self.cfg, r - first + 1, of, prior)
                        if lk.verdict != "undecided":
                            out[name] = lk.model_dump() | {
                                "launches": 2 * r,
                                "naive": math.exp(naive_shift(cells)),
                            }
                if len(out) == len(noises):
                    break
        return out

    def pair(self, ref_slowdown, noises: dict[str, LaunchNoise]) -> dict:
        """Reference arm (full budget), then the candidate look by look on one launch; {} for a
        session not started (or, with alternating arms, not finished) by `--deadline-s`."""
        if self.past_deadline():
            return {}
        if self.args.arms == "interleaved":
            return self.pair_interleaved(ref_slowdown, noises)
        if self.args.arms == "alternating":
            return self.pair_alternating(ref_slowdown, noises)
        if self.args.arms == "blocks":
            return self.pair_blocks(ref_slowdown, noises)
        if self.args.arms == "cross-host":
            return self.pair_cross_host(ref_slowdown, noises)
        reps = self.args.repeats
        ref = self.arm(ref_slowdown, reps * self.cfg.looks)
        h = self.launch(0.0)
        out: dict = {}
        try:
            cand = [a[:0] for a in ref]
            undecided = set(noises)
            for k in range(1, self.cfg.looks + 1):
                batch = self.measure(h, reps, 1 if k == 1 else 0)
                cand = [np.concatenate([c, b]) for c, b in zip(cand, batch, strict=True)]
                for name in sorted(undecided):
                    lk = look(ref, cand, noises[name], self.cfg, k)
                    if lk.verdict != "undecided":
                        out[name] = lk.model_dump() | {"launches": 2}
                        undecided.discard(name)
                if not undecided:
                    break
        finally:
            server.stop(ServerArgs(server=h, grace_s=5))
        return out


def biased(knob: float | tuple[float, int], bias: float) -> float | tuple[float, int]:
    """The knob of a launch on a host `bias` slower: its sleep factor compounded (pure)."""
    if isinstance(knob, tuple):
        return ((1.0 + knob[0]) * (1.0 + bias) - 1.0, knob[1])
    return (1.0 + knob) * (1.0 + bias) - 1.0


def timed(
    bench: Bench, knob: float | tuple[float, int], noises: dict[str, LaunchNoise]
) -> tuple[dict, int, float]:
    """One session: its verdicts per noise variant, the launches it made and its wall seconds."""
    t0, n0, me = time.time(), len(bench.launches), threading.get_ident()
    out = bench.pair(knob, noises)
    # one session at a time: every launch since is its own (cross-host's run in threads)
    if bench.args.workers == 1:
        return out, len(bench.launches) - n0, time.time() - t0
    return out, sum(who == me for who, _ in bench.launches[n0:]), time.time() - t0


def table(results: dict) -> str:
    rows = [
        "| scenario | launch noise used | pairs | accepted | rejected | regression | inconclusive "
        "| median speedup | median CI | mean looks | confirming pairs | launches | session min |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for scen, by_noise in results["scenarios"].items():
        for noise_name, looks in by_noise.items():
            if not looks:  # every session cut by the deadline
                continue
            verdicts = [lk["verdict"] for lk in looks]
            rows.append(
                f"| {scen} | {results['noise'][noise_name]} | {len(looks)} | "
                + " | ".join(
                    str(verdicts.count(v)) for v in ("accepted", "rejected", "regression", "inconclusive")
                )
                + f" | {statistics.median(lk['speedup'] for lk in looks):.3f}"
                f" | [{statistics.median(lk['ci_low'] for lk in looks):.3f}, "
                f"{statistics.median(lk['ci_high'] for lk in looks):.3f}]"
                f" | {statistics.mean(lk['look'] for lk in looks):.2f} | {sum('first' in lk for lk in looks)}"
                f" | {sum(lk.get('launches', 0) for lk in looks)}"
                f" | {results.get('scenario_wall_s', {}).get(scen, 0) / 60:.1f} |"
            )
    return "\n".join(rows)


def combined(paths: list[Path]) -> str:
    """One table over several runs' JSON (e.g. one run split over two device sessions, each with
    its own calibration): each variant's sessions pooled; the launch-noise column says each run's."""
    runs = [json.loads(p.read_text()) for p in paths]
    out: dict = {"scenarios": {}, "noise": {}, "scenario_wall_s": {}}
    for run in runs:
        for scen, by_noise in run["scenarios"].items():
            for name, looks in by_noise.items():
                out["scenarios"].setdefault(scen, {}).setdefault(name, []).extend(looks)
            out["scenario_wall_s"][scen] = out["scenario_wall_s"].get(scen, 0) + run["scenario_wall_s"][scen]
    for name in runs[0]["noise"]:
        out["noise"][name] = "; ".join(run["noise"][name] for run in runs)
    return table(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calibration", type=int, default=8, help="A/A launches for the launch noise")
    p.add_argument("--aa-pairs", type=int, default=20)
    p.add_argument("--detect", action="append", default=[], help="F:N, e.g. 1.3:20")
    p.add_argument("--repeats", type=int, default=7, help="requests per prompt per look")
    p.add_argument("--looks", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--preset", default="cpu")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--unfixed", action="store_true", help="keep the full-pool cast (slow steps)")
    p.add_argument("--workers", type=int, default=1, help="pairs measured at once (each its own servers)")
    p.add_argument("--detect-layers", action="append", default=[], help="N:PAIRS, N extra layer passes")
    p.add_argument("--max-launches-per-arm", type=int, default=4, help="alternating arms' budget")
    p.add_argument("--keep-power", type=float, default=0.8, help="[decide] keep_power: the plan's power")
    p.add_argument(
        "--arms",
        choices=["sequential", "interleaved", "alternating", "blocks", "cross-host"],
        default="sequential",
    )
    p.add_argument("--host-bias", type=float, default=0.1, help="cross-host: the other host this much slower")
    p.add_argument("--server-args", default="", help="more launch.sh flags, e.g. '--layers 40'")
    p.add_argument("--deadline-s", type=float, default=0, help="start no session (or round) after this")
    p.add_argument("--aa-last", action="store_true", help="the detection scenarios before the A/A one")
    p.add_argument("--warmup", type=int, default=0, help="launches discarded before the calibration")
    p.add_argument(
        "--round-robin",
        action="store_true",
        help="one session of each scenario in turn (a cut run stays balanced)",
    )
    p.add_argument(
        "--combine", type=Path, nargs="+", help="only print the table of these runs' JSON together"
    )
    p.add_argument("--gpus", default="", help="e.g. 0,1: worker thread i launches its servers on GPU i mod n")
    p.add_argument(
        "--variants",
        default="calibrated,default",
        help="launch-noise variants judged: calibrated (the pooled history), default (a new host)",
    )
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    if args.combine:
        print(combined(args.combine))
        return
    t0 = time.time()
    tree = make_tree(Path(tempfile.mkdtemp(prefix="decisions-")) / "mla_server", not args.unfixed)
    bench = Bench(tree, args)
    samples = []
    pool = ThreadPoolExecutor(args.workers)
    for i in range(args.warmup):  # a cold machine's first launches run faster (issue 24, run 6)
        arm = bench.arm(0.0, args.repeats * args.looks)
        print(f"warm-up launch {i + 1} (discarded): location {arm_location(arm):.4f}", flush=True)
    if args.arms == "interleaved":
        shifts = pool.map(lambda _: bench.aa_pair(args.repeats * args.looks), range(args.calibration))
        for i, shift in enumerate(shifts):
            samples.append(
                AASample(
                    target_key="bench", group="same", session_id=f"c{i}", launch_number=1,
                    location_log=0.0, requests=0, shift_log=shift,
                )
            )  # fmt: skip
            print(f"calibration pair {i + 1}: shift {shift:+.4f}", flush=True)
        noises = {"calibrated": pair_noise(samples, bench.cfg), "default": pair_noise([], bench.cfg)}
    else:
        arms = pool.map(lambda _: bench.arm(0.0, args.repeats * args.looks), range(args.calibration))
        for i, arm in enumerate(arms):
            samples.append(
                AASample(
                    target_key="bench",
                    group="same",
                    session_id=f"c{i}",
                    launch_number=1,
                    location_log=arm_location(arm),
                    requests=sum(len(a) for a in arm),
                )
            )
            print(f"calibration launch {i + 1}: location {samples[-1].location_log:.4f}", flush=True)
        noises = {
            "calibrated": launch_noise(samples, bench.cfg),
            "default": LaunchNoise(sigma_log=bench.cfg.default_launch_noise),
        }
    noises = {k: v for k, v in noises.items() if k in args.variants.split(",")}
    results: dict = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "calibration": [s.shift_log if s.shift_log is not None else s.location_log for s in samples],
        "noise": {k: v.describe() for k, v in noises.items()},
        "scenarios": {},
    }
    plan: list[tuple[str, float | tuple[float, int], int]] = [("A/A (same tree)", 0.0, args.aa_pairs)]
    plan = [p for p in plan if p[2] > 0]
    plan += [(f"true {f}x", float(f) - 1.0, int(n)) for f, n in (d.split(":") for d in args.detect)]
    plan += [
        (f"{x} extra layers", (0.0, int(x)), int(n)) for x, n in (d.split(":") for d in args.detect_layers)
    ]
    if args.aa_last:
        plan = plan[1:] + plan[:1] if args.aa_pairs > 0 else plan
    results["scenario_wall_s"] = {name: 0.0 for name, _, _ in plan}
    results["scenarios"] = {name: {k: [] for k in noises} for name, _, _ in plan}
    if args.round_robin:  # session i of every scenario, then session i + 1 of every scenario, ...
        order = [(s, i) for i in range(max(n for *_, n in plan)) for s in plan if i < s[2]]
        groups = [order[i : i + args.workers] for i in range(0, len(order), args.workers)]
    else:
        groups = [[(s, i) for i in range(s[2])] for s in plan]
    for group in groups:
        for ((name, _, pairs), i), (out, launches, wall) in zip(
            group, pool.map(lambda o: timed(bench, o[0][1], noises), group), strict=True
        ):
            if not out:
                print(f"{name} pair {i + 1}/{pairs}: cut by the deadline (not counted)", flush=True)
                continue
            results["scenario_wall_s"][name] += wall  # session time, summed (sessions may overlap)
            for k, lk in out.items():
                results["scenarios"][name][k].append(lk)
            print(f"{name} pair {i + 1}/{pairs} ({launches} launches, {wall:.0f} s): " + ", ".join(
                f"{k} {lk['speedup']:.3f}x [{lk['ci_low']:.3f}, {lk['ci_high']:.3f}] {lk['verdict']}"
                + (f" (hosts ignored {lk['naive']:.3f}x)" if "naive" in lk else "")
                + (f" (first pair {lk['first']}, second {lk['second']['speedup']:.3f}x)" if "first" in lk else "")
                for k, lk in out.items()), flush=True)  # fmt: skip
        results["wall_s"] = time.time() - t0
        results["launch_s"] = [s for _, s in bench.launches]
        save(results, args.out)  # so far: a run cut short still leaves its table and its JSON
        if any(i == s[2] - 1 for s, i in group):  # a scenario's last session
            print(table(results), flush=True)
    results["wall_s"] = time.time() - t0
    startup = results["launch_s"] = [s for _, s in bench.launches]
    print(table(results))
    print(f"wall time {results['wall_s'] / 60:.1f} min; launch noise: {results['noise']}")
    if startup:
        print(
            f"{len(startup)} launches, start-up median {statistics.median(startup):.1f} s "
            f"(range {min(startup):.1f}-{max(startup):.1f} s)"
        )
    save(results, args.out)


def save(results: dict, out: Path | None) -> None:
    if out:
        out.write_text(
            json.dumps(results, indent=1, default=lambda o: None if o != o or math.isinf(o) else o)
        )


if __name__ == "__main__":
    main()
