"""Large H200-shaped torch.profiler traces made from a real H200 trace, for trace_analysis_vs_hta.py.

`tile` repeats the events of a real trace recorded on one H200 (default: the eager glm5 hook trace
in tests/data/traces/served, 5 ProfilerStep windows, every field Kineto wrote) until the file
reaches a size: each copy is shifted past the previous one in time, and its correlation ids,
External ids, flow ids and ProfilerStep numbers are offset so they stay unique. Metadata events
come once. Written in Kineto's layout (one event per line after `  `, `", "` separators).

With `world` > 1 it makes one rank of a tensor-parallel set: the real traces are of one GPU, so
each rank gets an NCCL all-reduce kernel on its own stream after every ALLREDUCE_EVERY compute
kernels. The rank `slow_rank` runs its compute kernels SLOW_FACTOR longer; the other ranks' all-reduces
last longer by the difference (they wait in the collective for the slow rank), as on a real TP
server with one slow GPU. The all-reduces are synthetic; everything else is the recorded trace.
"""

import gzip
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests/data/traces/served/h200-eager-hook.json.gz"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ALLREDUCE_EVERY = 24
ALLREDUCE_US = 9.0
"""An 8-GPU NVLink all-reduce of one decode token's hidden state: ~9 us with nobody waiting."""
SLOW_FACTOR = 1.15
SLOW_RANK = 3
NCCL_STREAM = 33


def _load(source: Path) -> tuple[dict, list[dict], list[dict]]:
    """(header fields, metadata events kept once, the events that are tiled)."""
    with gzip.open(source) as raw:
        doc = json.loads(raw.read())
    events = doc.pop("traceEvents")
    once = [e for e in events if e.get("ph") in ("M", "i") or e.get("cat") == "Trace"]
    tiled = [e for e in events if not (e.get("ph") in ("M", "i") or e.get("cat") == "Trace")]
    return doc, once, tiled


def _rank_events(events: list[dict], rank: int, world: int, slow_rank: int) -> list[dict]:
    """The events of one rank: compute kernels slower on slow_rank, an all-reduce every N kernels."""
    if world == 1:
        return events
    out: list[dict] = []
    owed = 0.0  # compute time the slow rank spent beyond this rank since the last all-reduce
    seen = 0
    for e in sorted(events, key=lambda e: e.get("ts", 0.0)):
        if e.get("cat") != "kernel":
            out.append(e)
            continue
        e = {**e, "args": dict(e["args"])}
        extra = e["dur"] * (SLOW_FACTOR - 1)
        if rank == slow_rank:
            e["dur"] = round(e["dur"] + extra, 3)
        else:
            owed += extra
        out.append(e)
        seen += 1
        if seen % ALLREDUCE_EVERY == 0:
            args = {
                "device": 0,
                "stream": NCCL_STREAM,
                "correlation": -1,
                "grid": [32, 1, 1],
                "block": [640, 1, 1],
            }
            dur = ALLREDUCE_US + (0.0 if rank == slow_rank else owed)
            out.append(
                {"ph": "X", "cat": "kernel", "name": ALLREDUCE, "pid": 0, "tid": NCCL_STREAM,
                 "ts": round(e["ts"] + e["dur"], 3), "dur": round(dur, 3), "args": args}
            )  # fmt: skip
            owed = 0.0
    return out


def tile(
    path: Path,
    size_bytes: int,
    rank: int = 0,
    world: int = 1,
    slow_rank: int = SLOW_RANK,
    source: Path = SOURCE,
) -> int:
    """Write the trace; returns the number of copies of the source trace in it."""
    head, once, events = _load(source)
    events = _rank_events(events, rank, world, min(slow_rank, world - 1))
    start = min(e["ts"] for e in events if "ts" in e)
    span = max(e["ts"] + e.get("dur", 0.0) for e in events if "ts" in e) - start + 1000.0
    corr = 1 + max(e.get("args", {}).get("correlation", 0) for e in events)
    ext = 1 + max(e.get("args", {}).get("External id", 0) for e in events)
    flow = 1 + max(e.get("id", 0) for e in events if isinstance(e.get("id"), int))
    steps = [int(e["name"].split("#")[1]) for e in events if e.get("name", "").startswith("ProfilerStep#")]
    step_count = 1 + max(steps) - min(steps) if steps else 0
    head["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    copies = 0
    with path.open("w") as out:
        out.write(json.dumps(head, indent=2)[:-2] + ',\n  "traceEvents": [\n')
        out.write("".join(f"  {json.dumps(e)},\n" for e in once))
        while not copies or out.tell() < size_bytes:
            lines = []
            for e in events:
                e = {**e}
                if "ts" in e:
                    e["ts"] = round(e["ts"] + copies * span, 3)
                if "id" in e and e.get("cat") == "ac2g":
                    e["id"] += copies * flow
                if step_count and e.get("name", "").startswith("ProfilerStep#"):
                    e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + copies * step_count}"
                args = e.get("args")
                if args and ("correlation" in args or "External id" in args):
                    args = e["args"] = {**args}
                    if args.get("correlation", -1) > 0:
                        args["correlation"] += copies * corr
                    if "External id" in args:
                        args["External id"] += copies * ext
                lines.append(f"  {json.dumps(e)}")
            out.write(",\n".join(lines) + ",\n")
            copies += 1
        out.seek(out.tell() - 2)
        out.write("\n  ]\n}\n")
        out.truncate()
    return copies
