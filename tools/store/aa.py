"""The A/A store as door tools: keep a baseline launch's location, return every launch of its
target; keep a baseline's output noise, return every one of its host and engine.

It runs here (`where="local"`), on the session store ($PERFLOOP_STORE's database or SQLite),
whatever host the target is on; through the door its answer is recorded, so a replayed session
sees the launch noise it decided with.
"""

from __future__ import annotations

from state.measurement.aa import AARecordArgs, AASamples
from state.measurement.correctness import OutputNoiseArgs, OutputNoiseSamples
from state.measurement.numerics import NumericsArgs, NumericsSamples
from tools.door.registry import tool
from tools.store.sessions import SessionStore, perfloop_home


@tool("aa.record", where="local")
def record(args: AARecordArgs) -> AASamples:
    """Add `args.sample` (unless `None`) and `args.more` to the A/A store; return all samples of
    `args.target_key`."""
    store = SessionStore.open(perfloop_home())
    try:
        for sample in ([args.sample] if args.sample is not None else []) + args.more:
            store.add_aa(sample)
        return AASamples(samples=store.aa_samples(args.target_key))
    finally:
        store.close()


@tool("outputs.noise_record", where="local")
def record_output_noise(args: OutputNoiseArgs) -> OutputNoiseSamples:
    """Keep one baseline's output noise (its session's earlier one replaced); return every sample
    of its host and engine, oldest first."""
    store = SessionStore.open(perfloop_home())
    try:
        store.add_output_noise(args.sample)
        return OutputNoiseSamples(samples=store.output_noise(args.sample.key))
    finally:
        store.close()


@tool("outputs.numerics_record", where="local")
def record_numerics(args: NumericsArgs) -> NumericsSamples:
    """Keep one baseline's numerics (its session's earlier one replaced); return every sample of its
    host, engine and model, oldest first (issue 61: beside the output noise)."""
    store = SessionStore.open(perfloop_home())
    try:
        store.add_numerics(args.sample)
        return NumericsSamples(samples=store.numerics(args.sample.key))
    finally:
        store.close()
