"""What perfloop asks a host about itself."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

from state.door.calls import ClockArgs, ClockResult, PathArgs
from state.measurement.arms import HostKind, HostKindArgs, MemoryFit, MemoryFitArgs
from tools.door.registry import tool
from tools.hosts import local


@tool("host.expand_user")
def expand_user(args: PathArgs) -> PathArgs:
    """The path with `~` expanded on the host where it runs (its user's home)."""
    return PathArgs(path=args.path.expanduser())


@tool("host.clock", where="local")
def clock(args: ClockArgs) -> ClockResult:
    """The time here, through the door so that a replay reads the recorded time (the search's
    budget in minutes is judged on it)."""
    return ClockResult(epoch_s=time.time())


def _nvidia_smi(*query: str) -> list[list[str]] | None:
    """Rows of an nvidia-smi CSV query, or None where there is no nvidia-smi (or it fails)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", *query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def _rss_bytes(pids: list[int]) -> int:
    """Resident memory of the processes (from /proc; gone ones count 0)."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += sum(int(ln.split()[1]) * 1024 for ln in status.splitlines() if ln.startswith("VmRSS:"))
    return total


def _mem_available() -> int:
    """MemAvailable of /proc/meminfo in bytes."""
    for ln in Path("/proc/meminfo").read_text().splitlines():
        if ln.startswith("MemAvailable:"):
            return int(ln.split()[1]) * 1024
    return 0


@tool("host.memory_fit")
def memory_fit(args: MemoryFitArgs) -> MemoryFit:
    """Free memory against what the running server holds, on its tightest device: per GPU its
    processes use (nvidia-smi compute apps of its process group), else host memory against its
    RSS. Where nvidia-smi lists no process of the group but GPUs are in use (a container that
    hides host pids), each used GPU's whole use counts as the server's (conservative)."""
    members = set(local.group_members(args.pgid))
    gpus = _nvidia_smi("--query-gpu=uuid,index,memory.free,memory.used")
    apps = _nvidia_smi("--query-compute-apps=pid,gpu_uuid,used_memory") if gpus else None
    if gpus:
        index = {g[0]: (g[1], int(float(g[2])) << 20, int(float(g[3])) << 20) for g in gpus}
        use: dict[str, int] = {}
        for pid, uuid, mib in apps or []:
            if pid.isdigit() and int(pid) in members and uuid in index:
                use[uuid] = use.get(uuid, 0) + (int(float(mib)) << 20)
        note = ""
        if not use and not apps and any(used for _, _, used in index.values()):
            use, note = {u: used for u, (_, _, used) in index.items() if used}, "server processes not visible"
        if use:
            tight = min(use, key=lambda u: index[u][1] - use[u])
            return MemoryFit(
                device="gpu",
                server_bytes=use[tight],
                free_bytes=index[tight][1],
                where=f"GPU {index[tight][0]}",
                note=note,
            )
    return MemoryFit(
        device="cpu",
        server_bytes=_rss_bytes(sorted(members)),
        free_bytes=_mem_available(),
        where="host memory",
    )


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (else what `platform` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@tool("host.kind")
def kind(args: HostKindArgs) -> HostKind:
    """The GPUs a server would see (nvidia-smi's, picked by `CUDA_VISIBLE_DEVICES`, indices or
    UUIDs: the args', else this process's environment's) and the CPU: what `[decide]
    reference_host` must share with the session's host."""
    rows = _nvidia_smi("--query-gpu=index,uuid,name") or []
    visible = args.cuda_visible_devices
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is not None:
        picks = [v.strip() for v in visible.split(",") if v.strip()]
        rows = [r for p in picks for r in rows if p in (r[0], r[1])]
    return HostKind(gpus=[r[2] for r in rows], cpu=_cpu_model())
