"""The A/A store as a door tool: keep a baseline launch's location, return every launch of its target.

It runs here (`where="local"`), on the session store ($PERFLOOP_STORE's database or SQLite),
whatever host the target is on; through the door its answer is recorded, so a replayed session
sees the launch noise it decided with.
"""

from __future__ import annotations

from state.measurement.aa import AARecordArgs, AASamples
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
