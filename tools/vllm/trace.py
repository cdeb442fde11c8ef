"""vLLM's own scopes in a torch.profiler trace: where a decode step's time goes, host or model.

vLLM V1 marks each model-runner step `execute_context_<n>(<tok>)_generation_<m>(<tok>)` (n requests
with prompt tokens, m decoding; pure decode: `execute_context_0(0)_...`), and with
`VLLM_CUSTOM_SCOPES_FOR_PROFILING=1` its phases `gpu_model_runner: preprocess|forward|postprocess|
sample|bookkeep` (the `gpu_` prefix on the CPU runner too). `phases` reads them over the decode
steps: the forward is the model; the rest is host work around it (building the batch's inputs,
sampling, bookkeeping). A decode whose host phases take longer than its forward is host-bound:
making the model faster gains at most the forward's share of the step, while more sequences per
step (`--max-num-seqs`, concurrency) share one step's host work.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from state.engines.vllm import DecodePhases

DECODE = re.compile(r"^execute_context_0\(0\)_generation_([1-9]\d*)\((\d+)\)$")
PHASE = re.compile(r"^gpu_model_runner: (preprocess|forward|postprocess|sample|bookkeep)$")
HOST_PHASES = ("preprocess", "postprocess", "sample", "bookkeep")


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def phases(path: Path) -> DecodePhases:
    """The phase scopes of a vLLM trace's decode steps (ValueError without decode markers)."""
    events = _events(path)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if DECODE.match(e.get("name", "")))
    if not steps:
        raise ValueError(f"{path}: no vLLM decode step markers (execute_context_0(0)_generation_*)")
    # a decode step's phases run from its marker to the next step's marker of any kind (sample and
    # bookkeep come after `execute_model` returns, outside its span), the last one to its own end
    # plus what follows before any other marker
    bounds = sorted(e["ts"] for e in events if e.get("name", "").startswith("execute_context_"))
    totals: dict[str, float] = {}
    for e in events:
        m = PHASE.match(e.get("name", ""))
        if not m:
            continue
        i = max((k for k, (a, _) in enumerate(steps) if a <= e["ts"]), default=-1)
        after = [b for b in bounds if b > steps[i][0]] if i >= 0 else []
        if i >= 0 and (not after or e["ts"] < after[0]):
            totals[m.group(1)] = totals.get(m.group(1), 0.0) + e["dur"]
    n = len(steps)
    per = {k: totals[k] / n / 1000.0 for k in ("preprocess", "forward", *HOST_PHASES[1:]) if k in totals}
    host = sum(per.get(k, 0.0) for k in HOST_PHASES)
    forward = per.get("forward", 0.0)
    return DecodePhases(
        steps=n,
        step_ms=sum(b - a for a, b in steps) / n / 1000.0,  # the marker's own span
        phase_ms=per,
        host_ms=host,
        forward_ms=forward,
        host_bound=host > forward,
    )


def decode_phases_of(path: Path) -> DecodePhases | None:
    """`phases` of a trace file with vLLM's decode markers and its forward scope, else None (a
    trace of another engine, or vLLM run without `VLLM_CUSTOM_SCOPES_FOR_PROFILING=1`)."""
    if not path.is_file():
        return None
    try:
        found = phases(path)
    except ValueError:
        return None
    return found if "forward" in found.phase_ms else None
