"""One pass over a trace's events into compact columns (the only per-event state kept in memory).

Host events (operators, annotations, Python frames, launch and sync API calls) go into per-thread
arrays; kernels into per-trace arrays; operator names with their dims and dtypes are interned to
small ints. Nothing here depends on event order: `tools.trace.analyses.walk` sorts each thread afterwards.
"""

from array import array
from dataclasses import dataclass, field

import msgspec
import numpy as np

from tools.trace.read.stream import Event

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
OP, ANNOTATION, PYFUNC, LAUNCH, GRAPH_LAUNCH, SYNC = range(6)
HOST_KINDS = {"cpu_op": OP, "user_annotation": ANNOTATION, "python_function": PYFUNC}
COLLECTIVES = ("gloo:", "nccl:")
"""Name prefixes of the record functions torch.distributed wraps each collective in: kept as ops."""
GRAPH_LAUNCH_CALLS = frozenset({"cudaGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch"})
SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpyAsync",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
    }
)
"""Runtime/driver calls that block the host until the device has finished queued work
(`cudaMemcpyAsync` too: to pageable host memory, as `.item()`/`.tolist()`/`.cpu()` copy, it returns
only once the copy, queued after the step's kernels, is done; on the H200's API-method trace under
CUDA graphs one such copy held the host 6.5 ms of an 8.7 ms step)."""

_DECODE = msgspec.json.decode
DimsKey = tuple[tuple[int, ...], ...]
OpKey = tuple[str, DimsKey, tuple[str, ...]]


@dataclass
class _TimedColumns:
    """Start and duration of each event (`times`, pairs) and integer fields (`ints`): two flat
    arrays, so that adding an event is two C calls."""

    times: array = field(default_factory=lambda: array("d"))
    ints: array = field(default_factory=lambda: array("q"))


@dataclass
class HostColumns(_TimedColumns):
    """One host thread's events; `ints` pairs: kind (OP..SYNC) and an int payload: the interned op
    key for OP/ANNOTATION/PYFUNC/SYNC, the correlation id for LAUNCH/GRAPH_LAUNCH (read as numpy
    views: `np.frombuffer(cols.ints, dtype=np.int64)[0::2]` are the kinds)."""


@dataclass
class KernelColumns(_TimedColumns):
    """Every device event; `ints` triples: device index, correlation id (-1 if none), interned
    kernel name (`tools.trace.analyses.device` reads them as numpy views)."""


@dataclass
class Collected:
    """Everything one pass keeps: interned keys, host threads, kernels, step markers, launch time."""

    keys: dict[OpKey, int] = field(default_factory=dict)
    raw_keys: dict[tuple[str, bytes, bytes], int] = field(default_factory=dict)
    key_list: list[OpKey] = field(default_factory=list)
    threads: dict[tuple, HostColumns] = field(default_factory=dict)
    kernels: KernelColumns = field(default_factory=KernelColumns)
    kernel_names: dict[str, int] = field(default_factory=dict)
    graph_corrs: set[int] = field(default_factory=set)
    device_names: list[str] = field(default_factory=list)
    events: int = 0
    """Events seen, of any phase or category."""
    cuda_api_calls: int = 0
    """CUDA runtime/driver calls seen: a trace with them was taken on a GPU."""

    @property
    def launch_us(self) -> float:
        """Time in kernel-launch calls (not graph launches), summed thread by thread in trace order."""
        total = 0.0
        for cols in self.threads.values():
            times = np.frombuffer(cols.times, dtype=np.float64)
            kinds = np.frombuffer(cols.ints, dtype=np.int64)[0::2]
            launches = times[1::2][kinds == LAUNCH]
            total = float(np.cumsum(np.concatenate([[total], launches]))[-1])
        return total

    def intern(self, key: OpKey) -> int:
        """The small int standing for an (op name, dims, types) key."""
        found = self.keys.get(key)
        if found is None:
            found = self.keys[key] = len(self.key_list)
            self.key_list.append(key)
        return found

    def intern_raw(self, name: str, dims: bytes, types: bytes) -> int:
        """intern() for an op whose dims and types are still raw JSON; each distinct one parsed once."""
        found = self.raw_keys.get((name, dims, types))
        if found is None:
            key = (name, dims_key(_DECODE(dims)) if dims else (), tuple(_DECODE(types)) if types else ())
            found = self.raw_keys[(name, dims, types)] = self.intern(key)
        return found

    def add(self, events: list[Event]) -> None:
        """Take in one batch of events; events of other phases and categories are skipped.

        One loop with everything it touches bound to locals: it runs once per event, and a method
        call or attribute lookup per event was a third of a trace's reading time."""
        self.events += len(events)
        kernel_times, kernel_ints = self.kernels.times.extend, self.kernels.ints.extend
        kernel_names, threads, raw_keys = self.kernel_names, self.threads, self.raw_keys
        intern, intern_raw = self.intern, self.intern_raw
        api_calls = 0
        pid = tid = None  # the thread of the last host event, and its columns' extend methods
        times = ints = kernel_times
        for e in events:
            if e.ph != "X":
                continue
            cat, name, args = e.cat, e.name, e.args
            if cat in DEVICE_CATS:  # a kernel, memcpy or memset
                number = kernel_names.get(name)
                if number is None:
                    number = kernel_names[name] = len(kernel_names)
                if args is None:
                    kernel_ints((0, -1, number))
                else:
                    corr = args.correlation
                    kernel_ints((args.device or 0, -1 if corr is None else corr, number))
                kernel_times((e.ts, e.dur))
                continue
            # an operator, keyed with its dims and dtypes; a collective's record function (gloo:*,
            # nccl:*) too: its span is the collective's time, waiting for the other ranks included
            if (
                cat == "cpu_op" or (cat == "user_annotation" and name.startswith(COLLECTIVES))
            ) and args is not None:
                raw = (name, bytes(args.input_dims), bytes(args.input_type))
                kind, payload = OP, raw_keys.get(raw)
                if payload is None:
                    payload = intern_raw(*raw)
            elif cat in LAUNCH_CATS:  # a launch (by correlation id) or a sync (by name); others dropped
                api_calls += 1
                corr = args.correlation if args is not None and args.correlation is not None else -1
                if name in SYNC_CALLS:
                    kind, payload = SYNC, intern((name, (), ()))
                elif name in GRAPH_LAUNCH_CALLS:
                    self.graph_corrs.add(corr)
                    kind, payload = GRAPH_LAUNCH, corr
                elif "Launch" in name or "launch" in name:
                    kind, payload = LAUNCH, corr
                else:
                    continue
            elif cat in HOST_KINDS:  # an annotation, a Python frame, or an operator without args
                kind, payload = HOST_KINDS[cat], intern((name, (), ()))
            else:
                continue
            if e.tid != tid or e.pid != pid:  # host events come in long runs of one thread
                pid, tid = e.pid, e.tid
                cols = threads.get((pid, tid))
                if cols is None:
                    cols = threads[(pid, tid)] = HostColumns()
                times, ints = cols.times.extend, cols.ints.extend
            times((e.ts, e.dur))
            ints((kind, payload))
        self.cuda_api_calls += api_calls


def dims_key(dims: list) -> DimsKey:
    """Input dims as a hashable key; lists of tensors (nested lists) become () as in key_averages."""
    return tuple(tuple(d) if isinstance(d, list) and all(isinstance(x, int) for x in d) else () for d in dims)
