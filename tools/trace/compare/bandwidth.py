"""Measure the host's memory copy bandwidth, for roofline lines of CPU-only traces."""

import time

COPY_BYTES = 256 << 20
REPEATS = 3


def measure_copy_bandwidth_gbs(nbytes: int = COPY_BYTES, repeats: int = REPEATS) -> float:
    """Best of `repeats` single-threaded copies of `nbytes`, in GB/s of bytes read plus written."""
    src = bytearray(nbytes)
    dst = bytearray(nbytes)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst[:] = src
        best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best / 1e9
