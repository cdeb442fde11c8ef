"""Requests and the scheduler thread: admission, prefill, batched decode, slot release."""

import logging
import queue
import threading
import traceback
from collections import deque
from dataclasses import dataclass, field

import torch

from mla_server.tokenizer import decode

log = logging.getLogger("mla_server")


@dataclass
class Request:
    """One generation request and the events it sends back to its HTTP handler.

    Events on `events`: ("token", text) for each visible token, then exactly one of
    ("finish", reason, final_text) or ("error", message).
    """

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    seed: int | None
    stop: list[str]
    output_ids: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)
    slots_device: torch.Tensor | None = None
    events: queue.Queue = field(default_factory=queue.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    done: bool = False
    score_top: int = 0  # a scoring request (max_tokens 0): top alternatives kept per position
    scores: tuple | None = None  # (own log-probabilities, top alternatives), set by a scoring prefill
    want_logprobs: bool = False  # a generating request that asked for its tokens' logprobs
    token_logprobs: list = field(default_factory=list)  # per generated token: (own, top alternatives)

    def __post_init__(self):
        self.generator = torch.Generator()
        if self.seed is not None:
            self.generator.manual_seed(self.seed)
        else:
            self.generator.seed()

    @property
    def slots_needed(self) -> int:
        """KV slots this request can fill: the prompt plus every generated token."""
        return len(self.prompt_ids) + self.max_tokens

    @property
    def last_token_id(self) -> int:
        """The token the next decode step feeds in."""
        return self.output_ids[-1]

    @property
    def position(self) -> int:
        """Position (and slot index) of the token the next decode step feeds in."""
        return len(self.prompt_ids) + len(self.output_ids) - 1

    def add_token(self, token_id: int) -> str | None:
        """Record a sampled token; return the finish reason if generation is over."""
        self.output_ids.append(token_id)
        text = decode(self.output_ids)
        if any(text.endswith(s) for s in self.stop):
            return "stop"
        return "length" if len(self.output_ids) >= self.max_tokens else None

    def final_text(self) -> str:
        """Generated text, cut before the first stop string."""
        text = decode(self.output_ids)
        cuts = [text.find(s) for s in self.stop if s in text]
        return text[: min(cuts)] if cuts else text


class Scheduler:
    """A thread that admits requests, prefills them one by one and decodes all running ones
    together, one `forward_decode` per step."""

    def __init__(self, runner, profiler, max_running: int, decode_steps: int = 1):
        self.runner = runner
        self.profiler = profiler
        self.max_running = max_running
        self.decode_steps = decode_steps  # --num-continuous-decode-steps
        self.allocator = runner.kv_pool.allocator
        self._waiting: deque = deque()
        self._running: list = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        """Start the scheduler thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread after its current step."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=10)

    def submit(self, req: Request) -> None:
        """Reserve the request's KV slots (raises PoolExhausted) and queue it."""
        req.slots = self.allocator.alloc(req.slots_needed)
        req.slots_device = torch.tensor(req.slots, device=self.runner.device)
        with self._cond:
            self._waiting.append(req)
            self._cond.notify()

    def cancel(self, req: Request) -> None:
        """Abort a request (client gone); its slots are freed on the next step."""
        req.cancelled.set()
        with self._cond:
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not (self._waiting or self._running or self._stopping):
                    self._cond.wait(timeout=0.05)
                if self._stopping:
                    return
                admitted = self._take_waiting()
            self.profiler.poll()
            for req in admitted:
                self._prefill(req)
            self._running = [r for r in self._running if not self._reap(r)]
            if self._running:
                self._decode()
            for _ in range(self.decode_steps - 1):  # more steps before admitting anyone
                self._running = [r for r in self._running if not self._reap(r)]
                if not self._running or self._stopping:
                    break
                self._decode()

    def _take_waiting(self) -> list:
        """Drop cancelled waiting requests (freeing their slots); take as many as fit."""
        self._waiting = deque(r for r in self._waiting if not self._reap(r))
        room = self.max_running - len(self._running)
        return [self._waiting.popleft() for _ in range(min(room, len(self._waiting)))]

    def _reap(self, req: Request) -> bool:
        """Release a finished or cancelled request's slots; True if it should leave."""
        if req.cancelled.is_set() or req.done:
            self._release(req)
            return True
        return False

    def _release(self, req: Request) -> None:
        req.done = True
        if req.slots:
            self.allocator.free(req.slots)
            req.slots = []

    def _prefill(self, req: Request) -> None:
        if req.max_tokens == 0:  # an echo request scores its prompt and generates nothing
            self._score(req)
            return
        try:
            token = self.runner.forward_extend(req)
        except Exception:  # noqa: BLE001 - report to the client, keep serving
            self._fail([req])
            return
        self._running.append(req)
        self._deliver(req, token)

    def _score(self, req: Request) -> None:
        try:
            req.scores = self.runner.forward_score(req, req.score_top)
        except Exception:  # noqa: BLE001 - report to the client, keep serving
            self._fail([req])
            return
        req.events.put(("finish", "length", ""))
        self._release(req)

    def _decode(self) -> None:
        batch = self.runner.build_decode_batch(self._running)
        try:
            with torch.profiler.record_function("forward_decode"):
                tokens = self.runner.forward_decode(batch)
        except Exception:  # noqa: BLE001 - report to the clients, keep serving
            self._fail(self._running)
            return
        finally:
            self.profiler.after_decode_step()
        for req, token in zip(self._running, tokens):
            self._deliver(req, token)

    def _deliver(self, req: Request, token: int) -> None:
        reason = req.add_token(token)
        if reason is None:
            req.events.put(("token", decode([token])))
            return
        req.events.put(("finish", reason, req.final_text()))
        self._release(req)

    def _fail(self, reqs: list) -> None:
        message = traceback.format_exc(limit=1).strip().splitlines()[-1]
        log.error("step failed: %s", traceback.format_exc())
        for req in reqs:
            req.events.put(("error", f"internal error: {message}"))
            self._release(req)
