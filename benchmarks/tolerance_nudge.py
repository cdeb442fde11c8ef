"""The output gate's two policies against numerics changes of known size, on the CPU demo target.

On the demo with the cast fix, every logit of the model is moved by `eps * cos(1.7 * token_id)` (a fixed pattern: logprobs
move by at most 2 eps, near-ties flip), for each eps in `--eps`, on one launch per eps; the
unchanged tree is the reference. For each of `--sessions` correctness sets (the target's timing
prompts plus the random prompts a session with that id would draw) it runs both gates exactly as
the loop does (`bench.outputs` for `exact`, `bench.score` + `compare` for `tolerance`) and prints
one row per eps: how many sets the exact gate refused, the spread (min / median / max over the
sets) of the decode-path top-1 agreement and of the max logprob difference, and the gates' wall
times (median).

    .venv/bin/python benchmarks/tolerance_nudge.py --eps 0.02,0.05,0.1,0.3,1 --sessions 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.decision.gate.correctness import correctness_prompts, differences  # noqa: E402
from agent.decision.gate.outputs import compare  # noqa: E402
from state.config.target import LaunchConfig  # noqa: E402
from state.door.calls import LaunchArgs, ServerArgs  # noqa: E402
from state.measurement.correctness import CorrectnessConfig, OutputsArgs  # noqa: E402
from state.measurement.tolerance import ScoreArgs  # noqa: E402
from tools import bench, server  # noqa: E402
from tools.tolerance.score import score  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from decisions import copy_demo  # noqa: E402

PROMPTS = ["Explain the KV cache.", "Write a haiku about GPUs."]
LOGITS = "        return F.linear(rms_norm(h, self.final_norm), self.lm_head).float()\n"
NUDGED = (
    "        import os\n\n"
    "        logits = F.linear(rms_norm(h, self.final_norm), self.lm_head).float()\n"
    '        eps = float(os.environ.get("BENCH_NUDGE", "0"))\n'
    "        return logits + eps * torch.cos(torch.arange(logits.shape[-1], device=logits.device) * 1.7)\n"
)


def make_tree(dest: Path) -> Path:
    """The demo target with the cast fix (short steps) and the logits knob `BENCH_NUDGE`."""
    copy_demo(dest, fixed=True)
    model = dest / "mla_server" / "model.py"
    text = model.read_text()
    assert LOGITS in text, "the demo's MLAModel.logits changed: update the benchmark"
    model.write_text(text.replace(LOGITS, NUDGED, 1))
    return dest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--eps", default="0.02,0.05,0.1,0.3,1")
    p.add_argument("--sessions", type=int, default=5, help="correctness sets (random prompts per session id)")
    p.add_argument("--random-prompts", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tolerance-nudge-"))
    tree = make_tree(tmp / "mla_server")
    cfg = CorrectnessConfig(random_prompts=a.random_prompts, max_prompt_chars=300, max_tokens=a.max_tokens,
                            concurrent=0, policy="tolerance", min_top1_agreement=0.5, max_logprob_diff=1.0)  # fmt: skip
    sets = [correctness_prompts(f"bench-{i}", PROMPTS, cfg) for i in range(a.sessions)]
    argv = ["bash", "launch.sh", "--port", "{port}", "--preset", "cpu", "--threads", str(a.threads)]

    def launch(eps: float, n: int):
        env = {"PYTHON": "{python}", "BENCH_NUDGE": str(eps)}
        return server.launch(LaunchArgs(
            repo=tree, launch=LaunchConfig(argv=argv, env=env, startup_timeout_s=300), python=sys.executable,
            log_path=tmp / f"server-{n}.log", tree_sha256="bench", instrumented=False, profile_dir=None,
            launch_number=n, pid_file=tmp / f"server-{n}.pid"))  # fmt: skip

    def gates(h, refs=None):
        outs, scores = [], []
        for i, prompts in enumerate(sets):
            oa = OutputsArgs(base_url=h.base_url, model="mla-demo", prompts=prompts, max_tokens=a.max_tokens)
            outs.append(bench.outputs(oa))
            conts = None if refs is None else [t.continuation for t in refs[i].texts]
            sa = ScoreArgs(base_url=h.base_url, model="mla-demo", prompts=prompts, continuations=conts,
                           max_tokens=a.max_tokens)  # fmt: skip
            scores.append(score(sa))
        return outs, scores

    h = launch(0.0, 0)
    try:
        ref_outs, ref_scores = gates(h)
    finally:
        server.stop(ServerArgs(server=h, grace_s=5))
    print(f"{a.sessions} correctness sets of {len(sets[0])} prompts x {a.max_tokens} tokens, CPU demo")
    print("| eps | exact gate refused | top-1 agreement min / median / max | max logprob diff min / median "
          "/ max | exact gate s | tolerance gate s |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for n, eps in enumerate((float(e) for e in a.eps.split(",")), start=1):
        h = launch(eps, n)
        try:
            outs, scores = gates(h, ref_scores)
        finally:
            server.stop(ServerArgs(server=h, grace_s=5))
        refused = sum(
            differences(r, o, [f"prompt {k + 1}" for k in range(len(r.sequential))]) is not None
            for r, o in zip(ref_outs, outs, strict=True)
        )
        results = [compare(r, c, cfg) for r, c in zip(ref_scores, scores, strict=True)]
        agree = sorted(r.top1_agreement for r in results)
        diff = sorted(r.max_logprob_diff for r in results)
        t_exact = statistics.median(o.duration_s for o in outs)
        t_tol = statistics.median(s.duration_s for s in scores)
        print(f"| {eps:g} | {refused}/{len(sets)} | {agree[0]:.1%} / {statistics.median(agree):.1%} / "
              f"{agree[-1]:.1%} | {diff[0]:.3f} / {statistics.median(diff):.3f} / {diff[-1]:.3f} | "
              f"{t_exact:.2f} | {t_tol:.2f} |", flush=True)  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
