"""What the numerics gate keeps and refuses: benign math changes and planted bugs on the demo's model.

In-process, no HTTP (the demo's MLA + MoE model of examples/targets/mla_server, built as
benchmarks/compile_gpu.py builds it): the baseline's greedy continuation of each prompt, decoded
alone, is the reference; the same tokens are then teacher-forced through the decode path (each step
fed the reference's token, its logits read) under the engine's own schedules on the unchanged model
(`batch of 2`, `batch of 4`: prompts sharing each decode step; `prefill (echo)`: the tokens scored
by one prefill, as the demo's echo scoring and a re-sent request score them) - the engine's
numerical noise - and alone under every variant of benchmarks/numerics_variants.py (benign changes
and planted bugs, each bug with its effect size). Each variant is judged by the numerics gate's
pure function (agent/decision/gate/moves.py `judge`).

Prints per variant its class, effect, verdict, max |dlogprob| against the engine's own and the
prompts beyond; then benign kept, bugs refused, bugs >= 5% refused and the smallest effect from
which >= 80% of the bugs are refused.

    .venv/bin/python benchmarks/numerics_gate.py      # CPU: cpu preset, 2 layers, 8 prompts x 24 tokens
    python3 benchmarks/numerics_gate.py --device cuda --preset glm5 --layers 8   # one GPU
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "examples" / "targets" / "mla_server"
sys.path[:0] = [str(ROOT), str(TARGET), str(ROOT / "benchmarks")]

import torch  # noqa: E402
from numerics_variants import Variant, precise, variants  # noqa: E402

from agent.decision.gate.moves import judge, line  # noqa: E402  (the gate's own test)
from state.measurement.numerics import (  # noqa: E402
    PRECISE,
    ForcedScores,
    ForcedText,
    ForcedToken,
    NumericsNoise,
    NumericsVerdict,
)

PROMPTS = [
    "Explain the KV cache in one sentence.", "Write a haiku about GPUs.", "List three prime numbers.",
    "What is 17 times 23?", "Translate 'good morning' into French.", "Name a river in Africa.",
    "Summarise the plot of Hamlet.", "Why is the sky blue?", "Give me a recipe for pancakes.",
    "How does a transistor work?", "Write a limerick about a cat.", "What is the capital of Peru?",
    "Describe attention in transformers.", "Count from one to ten.", "Who painted the Mona Lisa?",
    "Define entropy in physics.",
]  # fmt: skip
FIRST, LAST = 32, 126  # printable ASCII: the demo's greedy choice set


def build(a: argparse.Namespace, static: bool):
    """The demo's ModelRunner (`static`: the static-shape decode step, cuda's path; no CUDA graphs,
    so a patched function is what runs) and the names the variants patch."""
    import mla_server.model as mod
    from mla_server.config import parse_config
    from mla_server.model_runner import ModelRunner

    argv = ["--port", "1", "--preset", a.preset, "--device", a.device, "--layers", str(a.layers),
            "--pool-slots", str(a.pool), "--seed", str(a.seed), "--disable-cuda-graph"]  # fmt: skip
    runner = ModelRunner(parse_config(argv), static_decode=static)
    return SimpleNamespace(runner=runner, model=runner.model, backend=runner.attn_backend, mod=mod)


def step_logits(runner, reqs) -> torch.Tensor:
    """One decode step of `reqs` (the server's batch build and layers, without sampling)."""
    import functools

    batch = runner.build_decode_batch(reqs)
    if runner.graph_runner is not None:
        return runner.graph_runner.forward(batch)[: len(reqs)]
    attend = functools.partial(runner.attn_backend.forward_decode, batch=batch)
    h = runner.run_layers(runner.model.embed[batch.input_ids], batch.positions, attend, decode=True)
    return runner.model.logits(h)[: len(reqs)]


def forced(
    ctx, prompts: list[str], refs: list[list[int]] | None, tokens: int, batch: int
) -> list[torch.Tensor]:
    """Per prompt the log-softmax rows `[tokens, vocab]` of its reference's positions, teacher-forced
    through prefill (first token) and decode, `batch` prompts sharing each decode step; `refs` None:
    greedy, this side is the reference (its tokens in `ctx.tokens`)."""
    from mla_server.scheduler import Request
    from mla_server.tokenizer import encode

    runner, out, chosen = ctx.runner, [], []
    with torch.inference_mode():
        for g in range(0, len(prompts), batch):
            group = list(range(g, min(g + batch, len(prompts))))
            reqs, rows = [], {i: [] for i in group}
            for i in group:
                req = Request(encode(prompts[i]), tokens + 1, 0.0, None, [])
                req.slots = runner.kv_pool.allocator.alloc(req.slots_needed)
                req.slots_device = torch.tensor(req.slots, device=runner.device)
                reqs.append(req)
            try:
                for i, req in zip(group, reqs, strict=True):  # prefill one by one, as the server admits them
                    rows[i].append(runner.model.logits(runner._extend_hidden(req)[-1:]).float())
                for t in range(tokens):
                    for i, req in zip(group, reqs, strict=True):
                        lp = rows[i][-1][0]
                        nxt = refs[i][t] if refs else FIRST + int(lp[FIRST : LAST + 1].argmax())
                        req.output_ids.append(nxt)
                    if t + 1 < tokens:
                        logits = step_logits(runner, reqs).float()
                        for k, i in enumerate(group):
                            rows[i].append(logits[k : k + 1])
            finally:
                for req in reqs:
                    runner.kv_pool.allocator.free(req.slots)
            for i, req in zip(group, reqs, strict=True):
                out.append(torch.log_softmax(torch.cat(rows[i]), -1).cpu())
                chosen.append(req.output_ids[:tokens])
    ctx.tokens = chosen
    return out


def echo(ctx, prompts: list[str], refs: list[list[int]]) -> list[torch.Tensor]:
    """The reference's tokens scored by one prefill of prompt + continuation (the echo path)."""
    from mla_server.scheduler import Request
    from mla_server.tokenizer import encode

    runner, out = ctx.runner, []
    with torch.inference_mode():
        for p, ref in zip(prompts, refs, strict=True):
            ids = encode(p)
            req = Request(ids + ref[:-1], 1, 0.0, None, [])
            req.slots = runner.kv_pool.allocator.alloc(req.slots_needed)
            req.slots_device = torch.tensor(req.slots, device=runner.device)
            try:
                h = runner._extend_hidden(req)[len(ids) - 1 :]
                out.append(torch.log_softmax(runner.model.logits(h).float(), -1).cpu())
            finally:
                runner.kv_pool.allocator.free(req.slots)
    return out


def scores(schedule: str, prompts, refs, rows, top_k: int, duration: float) -> ForcedScores:
    """ForcedScores of one side: per position the reference token's logprob (over the whole vocabulary,
    as the demo's echo scoring gives it), its rank among this side's top-k printable tokens (1: this
    side's greedy choice, the server's argmax, first of bf16 ties), and that top-k."""
    texts = []
    for p, ref, lp in zip(prompts, refs, rows, strict=True):
        printable = lp[:, FIRST : LAST + 1]
        greedy = (FIRST + printable.argmax(-1)).tolist()  # the server's choice (first of ties)
        ids = (FIRST + printable.topk(top_k + 1, -1).indices).tolist()
        toks = []
        for t, r in enumerate(ref):
            top = [greedy[t], *(i for i in ids[t] if i != greedy[t])][:top_k]
            toks.append(ForcedToken(token=chr(r), logprob=float(lp[t, r]),
                                    rank=top.index(r) + 1 if r in top else 0,
                                    top={chr(i): float(lp[t, i]) for i in top}))  # fmt: skip
        texts.append(ForcedText(prompt=p, continuation="".join(map(chr, ref)), tokens=toks))
    return ForcedScores(schedule=schedule, texts=texts, duration_s=round(duration, 3))


class Cut(Exception):
    """SIGTERM: stop after the variant being run, keep what was judged."""


CUT = []


def _cut(*_):
    CUT.append(True)  # seen between variants, where torch.compile swallowed the exception
    raise Cut


def run_variant(v: Variant, ctx, other, a, prompts, refs) -> tuple[list[torch.Tensor], float]:
    side = other() if v.static else ctx
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        v.apply(side, stack, v.meter)
        rows = forced(side, prompts, refs, a.tokens, 1)
    return rows, time.perf_counter() - t0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--preset", choices=["cpu", "glm5"], default="cpu")
    p.add_argument("--layers", type=int, default=2, help="layers (the cpu preset has 4, glm5 78)")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    p.add_argument("--pool", type=int, default=2048, help="KV pool slots")
    p.add_argument(
        "--past", type=int, default=32, help="the rope bug's position (every prompt reaches past 32)"
    )
    p.add_argument("--batches", default="2,4", help="the engine's batch schedules")
    p.add_argument("--only", default="", help="comma-separated substrings: run only matching variants")
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile variants")
    p.add_argument(
        "--no-precise", action="store_true", help="no float32 precision reference: the schedules alone"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads on the CPU (1: 10x faster than 2 on a shared 2-core host)",
    )
    p.add_argument("--json", type=Path, default=None, help="write the rows here")
    p.add_argument("--dump", type=Path, default=None, help="write every side's teacher-forced scores here")
    p.add_argument("--rejudge", type=Path, default=None,
                   help="no model: judge the sides a --dump recorded (.json or .json.gz) with today's test")  # fmt: skip
    p.add_argument(
        "--static-decode", action="store_true", help="cuda's static decode step on the CPU (a dry run)"
    )
    return p.parse_args(argv)


def bench(a: argparse.Namespace) -> dict:
    """Run the benchmark, printing the table as it goes; the rows, the engine's noise and the summary."""
    if a.device == "cpu" and a.threads:
        torch.set_num_threads(a.threads)
    t_start = time.perf_counter()
    prompts = (PROMPTS * (a.prompts // len(PROMPTS) + 1))[: a.prompts]
    prompts = [q if i < len(PROMPTS) else f"{q} ({i})" for i, q in enumerate(prompts)]
    static = a.device == "cuda" or a.static_decode
    ctx = build(a, static)
    cache = {}

    def other():  # the opposite decode path, built once
        if "ctx" not in cache:
            cache["ctx"] = build(a, not static)
        return cache["ctx"]

    t0 = time.perf_counter()
    ref_rows = forced(ctx, prompts, None, a.tokens, 1)
    refs = ctx.tokens
    reference = scores("alone", prompts, refs, ref_rows, 5, time.perf_counter() - t0)
    sched = []
    for n in [int(b) for b in a.batches.split(",") if b]:
        t0 = time.perf_counter()
        rows = forced(ctx, prompts, refs, a.tokens, n)
        sched.append(scores(f"batch of {n}", prompts, refs, rows, 5, time.perf_counter() - t0))
    t0 = time.perf_counter()
    sched.append(
        scores("prefill (echo)", prompts, refs, echo(ctx, prompts, refs), 5, time.perf_counter() - t0)
    )
    if not a.no_precise:
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            precise(ctx, stack)
            rows = forced(ctx, prompts, refs, a.tokens, 1)
        sched.append(scores(PRECISE, prompts, refs, rows, 5, time.perf_counter() - t0))
    noise = NumericsNoise(reference=reference, schedules=sched, key=f"{a.device}/{a.preset}/{a.layers}")
    eng = {s.schedule: max(abs(c.logprob - r.logprob) for ct, rt in zip(s.texts, reference.texts, strict=True)
                           for c, r in zip(ct.tokens, rt.tokens, strict=True)) for s in sched}  # fmt: skip
    dev = (
        torch.cuda.get_device_name() if a.device == "cuda" else "cpu" + (" (static decode)" if static else "")
    )
    print(f"{dev}, torch {torch.__version__}, {a.preset} preset, {a.layers} layer(s), {a.prompts} prompts x "
          f"{a.tokens} tokens; the engine's own max |dlogprob|: "
          + ", ".join(f"{k} {v:.4g}" for k, v in eng.items())
          + " (agent/decision/gate/moves.py judges)", flush=True)  # fmt: skip
    print("| variant | class | effect | verdict | from the float32 math (the baseline's) | x per prompt (>= at 99%) "
          "| mean \\|dlogprob\\| (the engine's own) | max \\|dlogprob\\| | gross | top-1 flips | s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    out, cut = [], False
    only = [s for s in a.only.split(",") if s]
    todo = [v for v in variants(a.past) if not (only and not any(s in v.name for s in only))]
    todo = [v for v in todo if not (v.compiles and a.no_compile)]
    todo.sort(key=lambda v: v.compiles)  # the compiles last: a deadline cuts them, not 40 others
    signal.signal(signal.SIGTERM, _cut)  # a deadline (timeout) ends the run with what it judged
    try:
        for v in todo:
            out.append(judged(v, ctx, other, a, prompts, refs, reference, noise))
            if CUT:
                raise Cut
    except Cut:
        cut = True
        print(f"cut (SIGTERM) after {len(out)} of {len(todo)} variants", flush=True)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    summary = summarise(out)
    took = time.perf_counter() - t_start
    print("\n" + "\n".join(summary["lines"]) + f"\n{took:.0f} s in all", flush=True)
    result = {"args": {k: str(x) for k, x in vars(a).items()}, "device": dev, "torch": torch.__version__,
              "engine": eng, "rows": out, "summary": summary, "seconds": round(took, 1), "cut": cut}  # fmt: skip
    if a.dump:
        sides = {"reference": reference.model_dump(), "schedules": [s.model_dump() for s in sched],
                 "candidates": {r["name"]: {"class": r["class"], "effect_pct": r["effect_pct"],
                                            "scores": r.pop("_scores")} for r in out}}  # fmt: skip
        a.dump.write_text(json.dumps(sides))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return result


def judged(v: Variant, ctx, other, a, prompts, refs, reference, noise) -> dict:
    """One variant run, scored and judged: its row (printed as it comes)."""
    rows, dur = run_variant(v, ctx, other, a, prompts, refs)
    cand = scores("candidate", prompts, refs, rows, 5, dur)
    equal = all(t.rank == 1 for text in cand.texts for t in text.tokens)
    verdict = judge(reference, noise.schedules, cand, texts_equal=equal)
    measured = v.meter.effect
    eff = v.nominal if v.nominal is not None else measured
    row = {"name": v.name, "class": v.cls, "effect_pct": eff, "measured_pct": measured, "at": v.at,
           "texts_equal": equal,
           "seconds": round(dur, 1), "line": line(verdict), **verdict.model_dump()}  # fmt: skip
    if a.dump:
        row["_scores"] = cand.model_dump()
    e = (
        "-"
        if v.cls == "benign"
        else "never acted"
        if measured is None
        else f"{eff:.3g}% ({v.at}: {measured:.3g}%)"
    )
    print(f"| {v.name} | {v.cls} | {e} | {cells(verdict)} | {verdict.flips} | {dur:.1f} |", flush=True)
    return row


def cells(v: NumericsVerdict) -> str:
    """A verdict's columns of the table: verdict, distance from the float32 math (the baseline's),
    the ratio (its bound), the mean move (the engine's own), the largest move, gross prompts."""
    far = (f"{v.precise_dlogprob:.3g} ({v.baseline_precise_dlogprob:.3g})"
           if v.yardstick == "precise" else "- (no precision reference)")  # fmt: skip
    return (f"{v.verdict} | {far} | {v.ratio:.2f} ({v.ratio_low:.2f}) | {v.mean_dlogprob:.3g} "
            f"({v.engine_mean_dlogprob:.3g}) | {v.max_dlogprob:.3g} | {v.gross}")  # fmt: skip


def summarise(rows: list[dict]) -> dict:
    """Benign kept, bugs refused (all, >= 5% effect) and the smallest effect from which >= 80% of
    the bugs (every bug of that effect or more) are refused."""
    benign = [r for r in rows if r["class"] == "benign"]
    bugs = [r for r in rows if r["class"] == "bug" and r["effect_pct"] is not None]
    kept = sum(r["verdict"] != "beyond" for r in benign)
    refused = sum(r["verdict"] == "beyond" for r in bugs)
    big = [r for r in bugs if r["effect_pct"] >= 5]
    big_refused = sum(r["verdict"] == "beyond" for r in big)
    smallest = None
    for e in sorted({r["effect_pct"] for r in bugs}):
        over = [r for r in bugs if r["effect_pct"] >= e]
        if sum(r["verdict"] == "beyond" for r in over) >= 0.8 * len(over):
            smallest = e
            break

    exact_bugs = [r["name"] for r in bugs if r["verdict"] == "exact"]
    # the line between the classes on max |dlogprob| alone (what any threshold could do here)
    line_at = min((r["max_dlogprob"] for r in big), default=None)
    under = sum(r["max_dlogprob"] < line_at for r in benign) if line_at is not None else None

    def pct(k, n):
        return f"{k}/{n} ({100 * k / n:.0f}%)" if n else "0/0"

    lines = [f"benign kept: {pct(kept, len(benign))}", f"bugs refused: {pct(refused, len(bugs))}",
             f"bugs of >= 5% effect refused: {pct(big_refused, len(big))}",
             "smallest bug effect from which >= 80% are refused: "
             + (f"{smallest:.2f}%" if smallest is not None else "none"),
             f"bugs judged exact (greedy texts unchanged, so kept whatever their logprobs): {len(exact_bugs)}"
             + (f" ({', '.join(exact_bugs)})" if exact_bugs else "")]  # fmt: skip
    if line_at is not None:
        lines.append(f"on max |dlogprob| alone: the smallest move of a bug >= 5% is {line_at:.4g}; "
                     f"{pct(under, len(benign))} of the benign changes move less")  # fmt: skip
    return {"benign_kept": kept, "benign": len(benign), "bugs_refused": refused, "bugs": len(bugs),
            "big_refused": big_refused, "big": len(big), "smallest_80": smallest,
            "exact_bugs": exact_bugs, "lines": lines}  # fmt: skip


def rejudge(path: Path) -> dict:
    """The candidates a `--dump` recorded, judged again by today's `judge` (pure: no model runs); the
    effects are the recorded ones. Prints the table and the summary."""
    import gzip

    d = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text())
    reference = ForcedScores.model_validate(d["reference"])
    sched = [ForcedScores.model_validate(x) for x in d["schedules"]]
    print(f"{path}: {len(reference.texts)} prompts; sides: {', '.join(x.schedule for x in sched)}")
    print("| variant | class | effect (recorded) | verdict | from the float32 math (the baseline's) | x per prompt "
          "(>= at 99%) | mean \\|dlogprob\\| (the engine's own) | max \\|dlogprob\\| | gross |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name, c in d["candidates"].items():
        cand = ForcedScores.model_validate(c["scores"])
        equal = all(t.rank == 1 for text in cand.texts for t in text.tokens)
        v = judge(reference, sched, cand, texts_equal=equal)
        eff = c["effect_pct"]
        print(f"| {name} | {c['class']} | {'-' if eff is None else f'{eff:.3g}%'} | {cells(v)} |")
        rows.append({"name": name, "class": c["class"], "effect_pct": eff, **v.model_dump()})
    summary = summarise(rows)
    print("\n" + "\n".join(summary["lines"]))
    return {"rows": rows, "summary": summary}


if __name__ == "__main__":
    args = parse()
    rejudge(args.rejudge) if args.rejudge else bench(args)
