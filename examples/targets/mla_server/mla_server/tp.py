"""Tensor parallelism (`--tp-size N`): one process per rank, rank 0 serving HTTP.

Rank 0 (the launched process) binds the port, then starts ranks 1..N-1 as its own children
(`python -m mla_server.server <same flags> --tp-rank R`): they stay in its process group, so a
signal to the group reaches every rank, and each dies with rank 0 (PR_SET_PDEATHSIG, and a thread
watching its parent). Every process it starts has NVLink multicast off (MULTICAST_OFF). Ranks join
one torch.distributed group: NCCL on cuda (rank R on GPU R), gloo on cpu, plus a gloo group that
carries rank 0's commands on both.

Each rank holds 1/N of the attention heads (q_proj rows, o_proj columns) and of each expert's ffn
(gate_up rows, down columns), and the whole latent KV pool (MLA's latent row is shared by every
head; SGLang keeps it whole on each rank too). Two all-reduces per layer sum the partial outputs of
o_proj and of the experts' down projection (in `functional.linear`, the model's F.linear, so the
model's layer code is TP1's). Rank 0's scheduler sends every model call (prefill,
scoring, decode step, profiler start and finish) to the other ranks before running it itself; they
run the same call on their shard (`worker_loop`), so on cuda each rank replays its own CUDA graphs.
"""

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

log = logging.getLogger("mla_server")
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}
NEVER = timedelta(days=365)  # idle ranks wait for rank 0's next command without timing out
_state = {"world": 1, "rank": 0, "ctrl": None}


def world() -> int:
    """Ranks in the tensor-parallel group (1 without --tp-size)."""
    return _state["world"]


def all_reduce(partial: torch.Tensor) -> torch.Tensor:
    """Sum a partial layer output over the ranks (identity at TP1); summed in float32."""
    if _state["world"] == 1:
        return partial
    full = partial.float()
    dist.all_reduce(full)
    return full.to(partial.dtype)


def shard(full: torch.Tensor, dim: int, parts: int = 1, partial: bool = False) -> torch.Tensor:
    """This rank's slice of `full` along `dim`; with `parts` > 1 the dim is first split into that
    many blocks (e.g. experts) and each block is sliced. `partial`: a weight sliced along its input
    dim, whose F.linear output is a partial sum (`functional.linear` all-reduces it)."""
    n, r = _state["world"], _state["rank"]
    if n == 1:
        return full
    shape = list(full.shape)
    blocks = full.view(*shape[:dim], parts, shape[dim] // parts, *shape[dim + 1:])
    size = shape[dim] // parts // n
    mine = blocks.narrow(dim + 1, r * size, size)
    out = mine.reshape(*shape[:dim], parts * size, *shape[dim + 1:]).contiguous()
    out.tp_partial = partial
    return out


class _Functional:
    """torch.nn.functional for the model (`F`): `linear` with a `partial` weight (shard) all-reduces
    its output, every other name is torch's. At TP1 no weight is partial: torch's F.linear alone."""

    def __getattr__(self, name):
        return getattr(torch.nn.functional, name)

    @staticmethod
    def linear(x, weight, bias=None):
        out = torch.nn.functional.linear(x, weight, bias)
        return all_reduce(out) if getattr(weight, "tp_partial", False) else out


functional = _Functional()


def launch_ranks(cfg) -> list[subprocess.Popen]:
    """Rank 0: start ranks 1..N-1 (children, same process group) with multicast off."""
    os.environ.update(MULTICAST_OFF)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    argv = [a for a in sys.argv[1:]]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [subprocess.Popen([sys.executable, "-m", "mla_server.server", *argv, "--tp-rank", str(r)],
                             cwd=here, env=dict(os.environ))
            for r in range(1, cfg.tp_size)]


def init(cfg) -> None:
    """Join the process group (rank 0 after launch_ranks; the others from its environment)."""
    os.environ.update(MULTICAST_OFF)
    if cfg.device == "cuda":
        torch.cuda.set_device(cfg.tp_rank)
    elif cfg.threads is None:  # the ranks share the host's cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // cfg.tp_size))
    backend = "nccl" if cfg.device == "cuda" else "gloo"
    dist.init_process_group(backend, rank=cfg.tp_rank, world_size=cfg.tp_size, timeout=NEVER)
    ctrl = dist.new_group(backend="gloo", timeout=NEVER) if backend == "nccl" else dist.group.WORLD
    _state.update(world=cfg.tp_size, rank=cfg.tp_rank, ctrl=ctrl)
    log.info("tensor parallel: rank %d of %d (%s)", cfg.tp_rank, cfg.tp_size, backend)


def send(cmd: tuple) -> None:
    """Rank 0: broadcast one command to the other ranks."""
    dist.broadcast_object_list([cmd], src=0, group=_state["ctrl"])


def receive() -> tuple:
    """Ranks > 0: the next command of rank 0."""
    box = [None]
    dist.broadcast_object_list(box, src=0, group=_state["ctrl"])
    return box[0]


def stop_ranks(ranks: list[subprocess.Popen], timeout_s: float = 10.0) -> None:
    """Rank 0: tell the other ranks to stop, wait for them, kill any left."""
    try:
        send(("stop",))
    except Exception as exc:  # noqa: BLE001 - a rank already gone (e.g. the group was signalled)
        log.info("could not reach every rank to stop them: %s", exc)
    deadline = time.monotonic() + timeout_s
    for proc in ranks:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def die_with_parent() -> None:
    """Ranks > 0: exit when rank 0 exits, however it exits."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
