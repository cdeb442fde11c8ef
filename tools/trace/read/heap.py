"""Keep freed memory in the heap while a trace is read, and give it back afterwards.

Reading a trace allocates and frees the same large buffers over and over (a chunk of the file, a
batch of decoded events, numpy temporaries). With glibc's defaults every buffer above 128 KiB is a
fresh `mmap` returned to the system when freed, so the next one faults in every page again; on the
machines measured here (`benchmarks/trace_analysis_vs_hta.py`) page faults took a fifth of the CPU
time of an analysis. Inside `kept_heap()` large buffers come from the heap and freed memory stays there for
the next one; on the way out the defaults come back and the free memory is returned (`malloc_trim`),
so a long-lived process (a session that analyzes its profiles) does not keep it.

glibc has no Python binding for `mallopt`; the standard library's ctypes reaches it. Elsewhere
(musl, macOS) this does nothing.
"""

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
KEPT = {M_MMAP_THRESHOLD: 16 << 20, M_TRIM_THRESHOLD: 256 << 20, M_TOP_PAD: 16 << 20}
"""While reading: buffers up to 16 MiB from the heap, up to 256 MiB kept free at its top, grown
16 MiB at a time. The summary's numpy temporaries hold 8 bytes per host event: 8 MB on a 640 MB
H200 trace (1 M host events), so with 4 MiB every one of them was a fresh mapping, and the summary
took a fifth longer (0.59 against 0.49 s, 40 MB less peak memory; 9 MiB as fast as 16).
Reading alone was measured on a 1 GB trace against 32 MiB / 1 GiB / 64 MiB (as fast, a third more
peak memory) and 1 MiB / 64 MiB / 4 MiB (slower, as small)."""
AFTER = {M_MMAP_THRESHOLD: 4 << 20, M_TRIM_THRESHOLD: 8 << 20, M_TOP_PAD: 128 << 10}
"""Afterwards: glibc's default top pad, a 4 MiB mmap threshold (where glibc's own adjustment would
have taken it anyway) and the trim threshold that adjustment would pick for it (twice it). Setting
any of these turns the adjustment off for good, so they stay."""

_depth = 0


def _libc() -> ctypes.CDLL | None:
    """This process's C library when it has glibc's mallopt and malloc_trim, else None (the
    symbols are looked up in the running program, which spawns nothing, unlike find_library)."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def _set(values: dict[int, int]) -> None:
    if (libc := _libc()) is not None:
        for param, value in values.items():
            libc.mallopt(ctypes.c_int(param), ctypes.c_int(value))


@contextmanager
def kept_heap() -> Iterator[None]:
    """Inside: freed memory is kept for reuse (see the module docstring); nested uses are one."""
    global _depth
    if _depth == 0:
        _set(KEPT)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            _set(AFTER)
            if (libc := _libc()) is not None:
                libc.malloc_trim(ctypes.c_size_t(0))
