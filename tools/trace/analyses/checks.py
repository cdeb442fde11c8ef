"""What a trace must hold to describe decode; each refusal is one TraceError line naming what is
missing and how the trace was probably taken wrong. A trace without step markers is not refused:
its steps are inferred (`tools.trace.analyses.windows`)."""

from tools.errors import TraceError
from tools.trace.read.collect import Collected


def check_events(col: Collected, source: str) -> None:
    """The trace holds events, and a GPU trace holds kernels."""
    if col.events == 0:
        raise TraceError(
            f"{source}: the trace holds no events; the profiler was probably stopped before anything "
            "ran (no step between start and stop) or exported before it was stopped"
        )
    # CUDA runtime calls mean GPU work; device names alone do not: torch writes them into every
    # trace on a GPU machine, also for a server that runs on its CPU.
    gpu = col.cuda_api_calls > 0
    if gpu and not col.kernels.times:
        where = f" on {col.device_names[0]}" if col.device_names else ""
        raise TraceError(
            f"{source}: a CUDA trace{where} with no GPU kernels; the profiler probably ran without "
            "ProfilerActivity.CUDA (or CUPTI could not record): profile with activities=[CPU, CUDA]"
        )
