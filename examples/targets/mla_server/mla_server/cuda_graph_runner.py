"""The static-shape decode step and its CUDA graphs (like SGLang's CudaGraphRunner).

On cuda every decode step runs one static-shape step: the batch is padded to a decode batch size
(padding rows feed token 0 at position 0 and write their KV row to the pool's padding slot), and
each row's kv indices are padded to the context length with the padding slot and masked past the
row's position. At start-up a CUDA graph of that step is captured for each batch size (largest
first, all sharing one memory pool); a step then replays the graph of its padded size, so the host
issues one graph launch instead of thousands of kernels. With --disable-cuda-graph, or for a batch
larger than every captured size (padded to --max-running), the same step runs eagerly on the same
buffers, so graph and eager decode give the same greedy tokens.
"""

import dataclasses
import functools
import logging
import time
from dataclasses import dataclass

import torch

log = logging.getLogger("mla_server")


@dataclass
class StaticDecodeBatch:
    """One static-shape decode step: views of the runner's input buffers, `bs` rows."""

    reqs: list  # the real requests (rows 0..len-1); the other rows are padding
    bs: int  # padded batch size
    input_ids: torch.Tensor  # [bs]
    positions: torch.Tensor  # [bs]
    out_cache_loc: torch.Tensor  # [bs] slot of each row's new token (padding rows: padding slot)
    kv_indices: torch.Tensor  # [bs, width] each row's slots 0..position, then the padding slot
    kv_mask: torch.Tensor | None = None  # [bs, width] True where the row attends (set by the step)


class CudaGraphRunner:
    """Builds static decode batches and runs them: a captured graph's replay, or eagerly."""

    def __init__(self, runner, cfg, capture: bool):
        self.runner = runner
        self.batch_sizes = cfg.decode_batch_sizes()
        self.max_bs = max([*self.batch_sizes, cfg.max_running])
        self.padding_slot = runner.kv_pool.padding_slot
        device, rows, width = runner.device, self.max_bs, cfg.context_len
        self.input_ids = torch.zeros(rows, dtype=torch.long, device=device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=device)
        self.out_cache_loc = torch.zeros(rows, dtype=torch.long, device=device)
        self.kv_indices = torch.zeros(rows, width, dtype=torch.long, device=device)
        self.kv_range = torch.arange(width, device=device)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        if capture:
            self.capture()

    def padded_bs(self, n: int) -> int:
        """The smallest decode batch size that holds n requests, else --max-running."""
        return next((bs for bs in self.batch_sizes if bs >= n), self.max_bs)

    def build(self, reqs: list, bs: int | None = None) -> StaticDecodeBatch:
        """Fill the input buffers for `reqs` (each has a last token and a position), padded to
        `bs` rows (default: the smallest decode batch size that holds them)."""
        bs = self.padded_bs(len(reqs)) if bs is None else bs
        pad = bs - len(reqs)
        host = torch.tensor([[r.last_token_id for r in reqs] + [0] * pad,
                             [r.position for r in reqs] + [0] * pad,
                             [r.slots[r.position] for r in reqs] + [self.padding_slot] * pad])
        self.input_ids[:bs].copy_(host[0])
        self.positions[:bs].copy_(host[1])
        self.out_cache_loc[:bs].copy_(host[2])
        self.kv_indices[:bs].fill_(self.padding_slot)
        for i, req in enumerate(reqs):
            self.kv_indices[i, : req.position + 1].copy_(req.slots_device[: req.position + 1])
        return StaticDecodeBatch(reqs, bs, self.input_ids[:bs], self.positions[:bs],
                                 self.out_cache_loc[:bs], self.kv_indices[:bs])

    def forward(self, batch: StaticDecodeBatch) -> torch.Tensor:
        """Float32 logits `[bs, vocab]`: the graph of `batch.bs` replayed, else the eager step."""
        if batch.bs in self.graphs:
            graph, logits = self.graphs[batch.bs]
            graph.replay()
            return logits
        return self.step(batch)

    def step(self, batch: StaticDecodeBatch) -> torch.Tensor:
        """The static-shape step itself: all layers on `bs` rows, then the logits."""
        batch = dataclasses.replace(batch, kv_mask=self.kv_range <= batch.positions.unsqueeze(1))
        runner = self.runner
        attend = functools.partial(runner.attn_backend.forward_decode_static, batch=batch)
        h = runner.run_layers(runner.model.embed[batch.input_ids], batch.positions, attend, decode=True)
        return runner.model.logits(h)

    def capture(self) -> None:
        """Capture one graph per decode batch size, largest first, sharing one memory pool."""
        started, pool = time.monotonic(), torch.cuda.graph_pool_handle()
        for bs in sorted(self.batch_sizes, reverse=True):
            batch = self.build([], bs)  # padding rows only: writes only the padding slot
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm up (cuBLAS handles, allocator) off the capture
                for _ in range(2):
                    self.step(batch)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                logits = self.step(batch)
            self.graphs[bs] = (graph, logits)
        torch.cuda.synchronize()
        log.info("captured CUDA graphs for decode batch sizes %s in %.1f s", self.batch_sizes,
                 time.monotonic() - started)
