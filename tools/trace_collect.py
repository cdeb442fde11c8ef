"""One pass over a trace's events into compact columns (the only per-event state kept in memory).

Host events (operators, annotations, Python frames, launch and sync API calls) go into per-thread
arrays; kernels into per-trace arrays; operator names with their dims and dtypes are interned to
small ints. Nothing here depends on event order: `tools.trace_walk` sorts each thread afterwards.
"""

from array import array
from dataclasses import dataclass, field

from tools.trace_stream import Event

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
OP, ANNOTATION, PYFUNC, LAUNCH, GRAPH_LAUNCH, SYNC = range(6)
HOST_KINDS = {"cpu_op": OP, "user_annotation": ANNOTATION, "python_function": PYFUNC}
GRAPH_LAUNCH_CALLS = frozenset({"cudaGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch"})
SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                        "cudaMemcpy", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize"})
"""Runtime/driver calls that block the host until the device has finished queued work."""

DimsKey = tuple[tuple[int, ...], ...]
OpKey = tuple[str, DimsKey, tuple[str, ...]]


@dataclass
class HostColumns:
    """One host thread's events: start, duration, kind (OP..SYNC) and an int payload per event.

    The payload is the interned op key for OP/ANNOTATION/PYFUNC/SYNC and the correlation id for
    LAUNCH/GRAPH_LAUNCH."""

    ts: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    kind: array = field(default_factory=lambda: array("b"))
    payload: array = field(default_factory=lambda: array("q"))


@dataclass
class KernelColumns:
    """Every device event: device index, start, duration, correlation id and interned kernel name."""

    device: array = field(default_factory=lambda: array("l"))
    ts: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    corr: array = field(default_factory=lambda: array("q"))
    name: array = field(default_factory=lambda: array("l"))


@dataclass
class Collected:
    """Everything one pass keeps: interned keys, host threads, kernels, step markers, launch time."""

    keys: dict[OpKey, int] = field(default_factory=dict)
    key_list: list[OpKey] = field(default_factory=list)
    threads: dict[tuple, HostColumns] = field(default_factory=dict)
    kernels: KernelColumns = field(default_factory=KernelColumns)
    kernel_names: dict[str, int] = field(default_factory=dict)
    graph_corrs: set[int] = field(default_factory=set)
    launch_us: float = 0.0
    device_names: list[str] = field(default_factory=list)

    def intern(self, key: OpKey) -> int:
        """The small int standing for an (op name, dims, types) key."""
        found = self.keys.get(key)
        if found is None:
            found = self.keys[key] = len(self.key_list)
            self.key_list.append(key)
        return found

    def add(self, events: list[Event]) -> None:
        """Take in one batch of events; events of other phases and categories are skipped."""
        for e in events:
            if e.ph != "X":
                continue
            cat = e.cat
            if cat in DEVICE_CATS:
                self._kernel(e)
            elif cat in LAUNCH_CATS:
                self._api_call(e)
            elif cat in HOST_KINDS:
                self._host(e, HOST_KINDS[cat])

    def _kernel(self, e: Event) -> None:
        """Record one kernel, memcpy or memset."""
        args = e.args
        k = self.kernels
        name = self.kernel_names.setdefault(e.name, len(self.kernel_names))
        k.device.append((args.device or 0) if args else 0)
        k.ts.append(e.ts)
        k.dur.append(e.dur)
        k.corr.append(args.correlation if args and args.correlation is not None else -1)
        k.name.append(name)

    def _api_call(self, e: Event) -> None:
        """Record a launch (by correlation id) or a sync (by name); other API calls are dropped."""
        corr = e.args.correlation if e.args and e.args.correlation is not None else -1
        if e.name in SYNC_CALLS:
            self._push(e, SYNC, self.intern((e.name, (), ())))
        elif e.name in GRAPH_LAUNCH_CALLS:
            self.graph_corrs.add(corr)
            self._push(e, GRAPH_LAUNCH, corr)
        elif "Launch" in e.name or "launch" in e.name:
            self.launch_us += e.dur
            self._push(e, LAUNCH, corr)

    def _host(self, e: Event, kind: int) -> None:
        """Record an operator (interned with its dims and dtypes), annotation or Python frame."""
        args = e.args
        if kind == OP and args is not None and args.input_dims is not None:
            key = (e.name, dims_key(args.input_dims), tuple(args.input_type or ()))
        else:
            key = (e.name, (), ())
        self._push(e, kind, self.intern(key))

    def _push(self, e: Event, kind: int, payload: int) -> None:
        """Append one host event to its thread's columns."""
        cols = self.threads.get((e.pid, e.tid))
        if cols is None:
            cols = self.threads[(e.pid, e.tid)] = HostColumns()
        cols.ts.append(e.ts)
        cols.dur.append(e.dur)
        cols.kind.append(kind)
        cols.payload.append(payload)


def dims_key(dims: list) -> DimsKey:
    """Input dims as a hashable key; lists of tensors (nested lists) become () as in key_averages."""
    return tuple(tuple(d) if isinstance(d, list) and all(isinstance(x, int) for x in d) else ()
                 for d in dims)
