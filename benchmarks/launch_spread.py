"""How far apart two launches of the same demo tree run: N pairs, each measured once one launch
after the other and once side by side with requests alternating (`bench.measure_pair`); prints the
shift (log speedup) of every pair and the spread of both.

    .venv/bin/python benchmarks/launch_spread.py --pairs 5 [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decisions import PROMPTS, Bench, make_tree

from agent.decision.stats.rule import arm_location, by_prompt, combined_shift
from state.config.target import MeasureConfig
from state.door.calls import MeasureArgs, PairArgs, ServerArgs
from tools import server
from tools.bench import measure_pair, measure_with_client


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--repeats", type=int, default=10, help="requests per prompt per arm")
    p.add_argument("--max-tokens", type=int, default=12)
    a = p.parse_args()
    ns = argparse.Namespace(preset="cpu", device="cpu", threads=a.threads, looks=1, max_tokens=a.max_tokens)
    bench = Bench(make_tree(Path(tempfile.mkdtemp()) / "mla_server", True), ns)

    def margs(h, reps: int) -> MeasureArgs:
        cfg = MeasureConfig(prompts=PROMPTS, max_tokens=a.max_tokens, repeats=reps, warmup_requests=1)
        return MeasureArgs(base_url=h.base_url, model="mla-demo", config=cfg, label="b", tree_sha256="x")

    def alone() -> list:
        h = bench.launch(0.0)
        try:
            return by_prompt(measure_with_client(margs(h, a.repeats)).requests, len(PROMPTS))
        finally:
            server.stop(ServerArgs(server=h, grace_s=5))

    seq, inter = [], []
    for i in range(a.pairs):
        r1, r2 = alone(), alone()
        seq.append(combined_shift(r1, r2))
        ha, hb = bench.launch(0.0), bench.launch(0.0)
        try:
            out = measure_pair(PairArgs(reference=margs(ha, a.repeats), candidate=margs(hb, a.repeats)))
        finally:
            for h in (ha, hb):
                server.stop(ServerArgs(server=h, grace_s=5))
        x, y = (
            by_prompt(out.reference.requests, len(PROMPTS)),
            by_prompt(out.candidate.requests, len(PROMPTS)),
        )
        inter.append(combined_shift(x, y))
        print(
            f"pair {i + 1}: sequential locations {arm_location(r1):.3f} {arm_location(r2):.3f} shift {seq[-1]:+.3f}"
            f" | interleaved {arm_location(x):.3f} {arm_location(y):.3f} shift {inter[-1]:+.3f}"
            f" (load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    print("| threads | pairs | SD of shift, sequential | SD of shift, interleaved | largest interleaved |")
    print("|---|---|---|---|---|")
    print(
        f"| {a.threads or 'default'} | {a.pairs} | {np.std(seq, ddof=1):.3f} | {np.std(inter, ddof=1):.3f} "
        f"| {max(abs(v) for v in inter):.3f} |"
    )


if __name__ == "__main__":
    main()
