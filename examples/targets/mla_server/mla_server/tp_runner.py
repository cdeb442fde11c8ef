"""Tensor parallelism's two sides of each model call (see mla_server/tp.py).

Rank 0 runs `TPModelRunner`: before each prefill, scoring prefill or decode step it sends the call
to the other ranks. Ranks > 0 run `worker_loop`: they mirror rank 0's requests (prompt, slots, the
token each step feeds in) and make the same calls on their own ModelRunner, whose results they
drop; the all-reduces inside the layers pair the ranks' calls up.
"""

import itertools
import logging

import torch

from mla_server import tp
from mla_server.model_runner import ModelRunner
from mla_server.scheduler import Request

log = logging.getLogger("mla_server")
_ids = itertools.count()


class TPModelRunner(ModelRunner):
    """Rank 0's runner: every model call is sent to the other ranks first."""

    def forward_extend(self, req) -> int:
        tp.send(("extend", self._spec(req)))
        return super().forward_extend(req)

    def forward_score(self, req, top: int):
        tp.send(("score", self._spec(req), top))
        return super().forward_score(req, top)

    def forward_decode(self, batch):
        tp.send(("decode", [(r.tp_id, r.last_token_id) for r in batch.reqs]))
        return super().forward_decode(batch)

    @staticmethod
    def _spec(req) -> tuple:
        req.tp_id = next(_ids)
        return req.tp_id, req.prompt_ids, req.slots


def worker_loop(runner: ModelRunner, profiler) -> None:
    """Ranks > 0: run rank 0's commands until it sends `stop`."""
    mirrors: dict[int, Request] = {}
    while True:
        cmd = tp.receive()
        kind = cmd[0]
        if kind == "stop":
            return
        try:
            if kind in ("extend", "score"):
                rid, prompt_ids, slots = cmd[1]
                req = Request(list(prompt_ids), 1, 0.0, 0, [])
                req.slots, req.slots_device = list(slots), torch.tensor(slots, device=runner.device)
                mirrors[rid] = req
                if kind == "extend":
                    runner.forward_extend(req)
                else:
                    runner.forward_score(req, cmd[2])
            elif kind == "decode":
                reqs = []
                for rid, token in cmd[1]:
                    mirrors[rid].output_ids.append(token)
                    reqs.append(mirrors[rid])
                mirrors = {rid: mirrors[rid] for rid, _ in cmd[1]}
                with torch.profiler.record_function("forward_decode"):
                    runner.forward_decode(runner.build_decode_batch(reqs))
            elif kind == "profile_start":  # rank 0 starts and finishes its profile between the
                profiler._start(cmd[1])      # same two steps
            elif kind == "profile_finish":
                profiler._finish(cmd[1])
        except Exception:  # noqa: BLE001 - keep following rank 0
            log.exception("rank command %s failed", kind)
