"""Regenerate the CUDA trace fixtures in this folder (run on a machine with a CUDA GPU).

A miniature MLA decode: per layer, the FP8 KV pool [N, 1, 576] is either cast whole to BF16
("full_pool_cast") or only its active rows are gathered, then cast ("gather_then_cast").
Usage: python make_cuda_traces.py OUT_DIR
"""

import gzip
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

POOL_SLOTS = 65536
ACTIVE_TOKENS = 100
LAYERS = 4
HEADS = 16


def forward_decode(pool: torch.Tensor, q: torch.Tensor, rows: torch.Tensor, gather: bool) -> torch.Tensor:
    """One decode step: per layer, make BF16 keys and score the query against the active rows."""
    out = q
    for _ in range(LAYERS):
        if gather:
            k = pool[rows].to(torch.bfloat16)
        else:
            k = pool.to(torch.bfloat16)[rows]
        out = torch.matmul(out, k.view(-1, 576).t()).softmax(-1) @ k.view(-1, 576)
    return out


def record(out_dir: Path, name: str, gather: bool) -> None:
    """Profile 3 decode steps (after 1 wait, 1 warm-up) and write the trace and key_averages tables."""
    pool = torch.zeros(POOL_SLOTS, 1, 576, device="cuda", dtype=torch.float8_e4m3fn)
    q = torch.randn(HEADS, 576, device="cuda", dtype=torch.bfloat16)
    rows = torch.arange(ACTIVE_TOKENS, device="cuda")

    def ready(prof: profile) -> None:
        prof.export_chrome_trace(str(out_dir / f"{name}.json.gz"))
        averages = prof.key_averages(group_by_input_shape=True)
        table = averages.table(sort_by="self_cuda_time_total", row_limit=20)
        with gzip.open(out_dir / f"{name}.key_averages.txt.gz", "wt") as out:
            out.write(table)

    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    steps = schedule(wait=1, warmup=1, active=3, repeat=1)
    with profile(activities=activities, record_shapes=True, schedule=steps, on_trace_ready=ready) as prof:
        for _ in range(5):
            with torch.profiler.record_function("forward_decode"):
                forward_decode(pool, q, rows, gather)
            torch.cuda.synchronize()
            prof.step()


if __name__ == "__main__":
    target = Path(sys.argv[1])
    record(target, "full_pool_cast_cuda", gather=False)
    record(target, "gather_then_cast_cuda", gather=True)
