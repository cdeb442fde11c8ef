"""A range worker's columns handed back through memory both processes see, not through a pickle.

Before forking, the reader makes one anonymous in-memory file (`os.memfd_create`) per worker; the
forked worker inherits it, writes its column arrays into it and empties them, so that only the rest
of its `Collected` (interned names, a few sets) is pickled. The reader then fills the empty arrays
straight from the file: one copy of each byte instead of a pickle's three (array to bytes, the
pipe, bytes to array), ~60 ms of a 640 MB trace's reading, all of it with this process waiting.
The file has no name and goes away with its last descriptor. Where there is no memfd (not Linux),
or the worker does not share this process's descriptors (started from a fork server), the columns
are pickled as before.
"""

import mmap
import os
from array import array

from tools.trace.read.collect import Collected


def can_share(forked: bool) -> bool:
    """Whether workers started this way can hand columns back through a memfd."""
    return forked and hasattr(os, "memfd_create")


def new_file() -> int:
    """A descriptor of a new anonymous in-memory file (close it when done)."""
    return os.memfd_create("perfloop-trace-columns", os.MFD_CLOEXEC)


def columns(col: Collected) -> list[array]:
    """Every column array of `col` in one fixed order: each thread's, then the kernels'."""
    out: list[array] = []
    for cols in col.threads.values():
        out += [cols.times, cols.ints]
    return [*out, col.kernels.times, col.kernels.ints]


def put(col: Collected, fd: int) -> list[int]:
    """In the worker: write `col`'s columns to the file `fd` (from its start), empty them, and
    return their sizes in bytes (what `take` needs)."""
    sizes = []
    for arr in columns(col):
        view = memoryview(arr).cast("B")
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])
        sizes.append(len(view))
        view.release()
        del arr[:]
    return sizes


def take(col: Collected, sizes: list[int], fd: int) -> Collected:
    """In the reader: fill `col`'s emptied columns from the file `fd` that `put` wrote."""
    if sum(sizes):
        with mmap.mmap(fd, sum(sizes), prot=mmap.PROT_READ) as mapped, memoryview(mapped) as whole:
            at = 0
            for arr, size in zip(columns(col), sizes, strict=True):
                arr.frombytes(whole[at : at + size])
                at += size
    return col
