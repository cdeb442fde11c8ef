"""The memory-bandwidth floor of the session's decode steps (pure): the baseline's, each kept chain
link's and the final one's, each against (weights + live KV bytes) over its GPUs' bandwidth.

A decode step reads every weight once and every live token's KV once at least, so no step can be
faster than those bytes at the card's peak bandwidth; how many times above it a step runs says how
much is left. The figures and where they come from:

- the weights and the KV bytes per token: the engine's, from the launch command
  (tools/engines/contract.py `Engine.footprint`; the demo server knows its presets and sizes);
  an engine that does not know its model's size gives no floor, and the line says so;
- the live tokens: the latest profile's count at or before the step's iteration (prompt plus
  completion of every request in flight); none profiled: the floor counts the weights alone, and
  says that it leaves the KV out;
- the bandwidth: the GPU the profile's trace names, looked up in the datasheet table
  (playbooks/roofline.py, named `H100 spec`); a CPU, an unnamed or unknown GPU: no floor, named.
"""

from __future__ import annotations

from typing import Literal

from playbooks.roofline import spec_bandwidth
from state.measurement.floor import ModelFootprint, StepFloor
from state.sessions.loop import LoopState
from tools.engines.registry import engine


def step_floor(
    label: str,
    role: Literal["baseline", "link", "final"],
    step_ms: float,
    footprint: ModelFootprint | None,
    live_tokens: int | None,
    bandwidth: tuple[float, str] | str,
) -> StepFloor:
    """One step against its floor (pure): floor_ms = (weight bytes + live tokens x KV bytes per
    token) / (GPUs x GB/s); `bandwidth` is (GB/s of one GPU, its source) or why there is none."""
    out = StepFloor(label=label, role=role, step_ms=step_ms)
    if footprint is None:
        return out.model_copy(update={"missing": "the engine does not know its model's size"})
    kv = live_tokens * footprint.kv_bytes_per_token if live_tokens is not None else None
    known = out.model_copy(
        update={"weight_bytes": footprint.weight_bytes, "kv_bytes": kv, "live_tokens": live_tokens}
    )
    if isinstance(bandwidth, str):
        return known.model_copy(update={"missing": bandwidth})
    gbs, source = bandwidth
    floor_ms = (footprint.weight_bytes + (kv or 0)) / (footprint.gpus * gbs * 1e6)
    return known.model_copy(
        update={
            "floor_ms": floor_ms,
            "bandwidth_gbs": gbs,
            "gpus": footprint.gpus,
            "bandwidth_source": source,
            "missing": "" if kv is not None else "KV not counted: no profile counted the live tokens",
        }
    )


def bandwidth_of(state: LoopState) -> tuple[float, str] | str:
    """(GB/s, `H100 spec`) of the GPU the session's profile names, or why there is none (pure)."""
    device = state.diagnosis.device_name if state.diagnosis is not None else None
    if device:
        return spec_bandwidth(device) or f"no bandwidth for {device}"
    if state.profiles and state.profiles[-1].device == "cpu":
        return "no bandwidth for the CPU"
    return "no bandwidth: no profile named the device"


def live_tokens(state: LoopState, iteration: int | None = None) -> int | None:
    """The tokens live in the KV cache by the latest profile at or before `iteration` (any: the
    latest), or None where none was taken (pure)."""
    taken = [p for p in state.profiles if iteration is None or p.iteration <= iteration]
    return taken[-1].active_tokens if taken else None


def floors_of(state: LoopState, before_ms: float | None, after_ms: float | None) -> list[StepFloor]:
    """The baseline's step (`before_ms`), each kept chain link's, and the final step (`after_ms`,
    where a change was kept), each against its floor (pure)."""
    model, bandwidth = engine(state.target.kind), bandwidth_of(state)
    out = []
    if before_ms is not None:
        first = model.footprint(state.target.launch.argv), live_tokens(state, 1)
        out.append(step_floor("baseline", "baseline", before_ms, *first, bandwidth))
    argv = state.target.launch.argv
    for d in state.decisions if state.target.proposer.mode == "chain" else []:
        if d.verdict != "accepted":
            continue
        argv = d.launch_argv or argv  # a kept launch option's command serves from here on
        if d.tpot_ms_after is not None and d.tpot_ms_before is not None:  # as the chain's links
            link = model.footprint(argv), live_tokens(state, d.iteration)
            out.append(step_floor(d.label, "link", d.tpot_ms_after, *link, bandwidth))
    if after_ms is not None and any(d.verdict == "accepted" for d in state.decisions):
        final = model.footprint(state.kept_argv), live_tokens(state)
        out.append(step_floor("final", "final", after_ms, *final, bandwidth))
    return out
