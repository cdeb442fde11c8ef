"""SGLang-compatible /start_profile and /stop_profile: torch.profiler over decode steps.

The HTTP thread requests a start or stop; the scheduler thread (which runs the model) starts and
stops torch.profiler between steps and writes `<output_dir>/<profile_id>-TP-<rank>.trace.json.gz`
atomically (temporary name, then rename). With --tp-size N, rank 0's controller sends its start and
finish to the other ranks (`mirror`), which profile the same steps and write their own rank's file.
"""

import logging
import os
import threading
import time
from dataclasses import dataclass

import torch

from mla_server.protocol import APIError, bad_request, field_of

log = logging.getLogger("mla_server")
KNOWN_ACTIVITIES = {"CPU", "GPU", "MEM", "CUDA_PROFILER", "RPD", "XPU"}
STOP_TIMEOUT_S = 300


@dataclass
class ProfileOptions:
    """A validated /start_profile body."""

    output_dir: str
    num_steps: int | None
    start_step: int
    activities: list[str]
    record_shapes: bool
    with_stack: bool
    profile_id: str


def parse_profile_options(body: dict) -> ProfileOptions:
    """Validate SGLang's ProfileReqInput fields (all optional); wrong types are a 400."""
    for name in ("profile_by_stage", "merge_profiles"):
        field_of(body, name, (bool,))
    field_of(body, "profile_prefix", (str,))
    field_of(body, "profile_stages", (list,))
    activities = field_of(body, "activities", (list,), ["CPU", "GPU"])
    unknown = [a for a in activities if not isinstance(a, str) or a not in KNOWN_ACTIVITIES]
    if unknown:
        raise bad_request(f"unknown profiler activities {unknown}", "activities")
    num_steps = field_of(body, "num_steps", (int,))
    start_step = field_of(body, "start_step", (int,), 0)
    if (num_steps is not None and num_steps < 1) or start_step < 0:
        raise bad_request("'num_steps' must be >= 1 and 'start_step' >= 0", "num_steps")
    default_dir = os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
    return ProfileOptions(
        output_dir=field_of(body, "output_dir", (str,), default_dir),
        num_steps=num_steps,
        start_step=start_step,
        activities=activities,
        record_shapes=field_of(body, "record_shapes", (bool,), True),
        with_stack=field_of(body, "with_stack", (bool,), False),
        profile_id=str(field_of(body, "profile_id", (str, int), time.time())),
    )


class ProfilerController:
    """Profiling state shared by the HTTP threads and the scheduler thread."""

    def __init__(self, rank: int = 0, mirror=None):
        self.rank = rank
        self.mirror = mirror  # rank 0 at TP > 1: sends ("profile_start" | "profile_finish", opts)
        self._lock = threading.Lock()
        self._opts: ProfileOptions | None = None
        self._prof = None
        self._skip = self._steps = 0
        self._stop_requested = False
        self._done = threading.Event()
        self._result: str | APIError = ""

    def request_start(self, opts: ProfileOptions) -> None:
        """Schedule a profile (HTTP thread); it starts after `start_step` decode steps."""
        try:
            os.makedirs(opts.output_dir, exist_ok=True)
        except OSError as exc:
            raise bad_request(f"cannot create output_dir: {exc}", "output_dir") from None
        with self._lock:
            if self._opts is not None:
                raise bad_request("profiling is already in progress; call /stop_profile first")
            self._skip, self._steps = opts.start_step, 0
            self._stop_requested, self._done = False, threading.Event()
            self._opts = opts  # last: the scheduler thread reads it without the lock

    def request_stop(self) -> str:
        """Stop profiling now (HTTP thread); wait for the trace and return its path."""
        with self._lock:
            if self._opts is None:
                raise bad_request("profiling is not in progress")
            self._stop_requested, done = True, self._done
        if not done.wait(STOP_TIMEOUT_S):
            raise APIError(503, "timed out waiting for the trace", kind="server_error")
        if isinstance(self._result, APIError):
            raise self._result
        return self._result

    def poll(self) -> None:
        """Between steps (scheduler thread): start a due profile, finish a stopped one."""
        with self._lock:
            opts, stop = self._opts, self._stop_requested
        if opts is None:
            return
        if self._prof is None and (self._skip == 0 or stop):
            self._start(opts)
        if stop:
            self._finish(opts)

    def after_decode_step(self) -> None:
        """Count a decode step (scheduler thread); finish after `num_steps` profiled steps."""
        opts = self._opts
        if opts is None:
            return
        if self._prof is None:
            self._skip = max(0, self._skip - 1)
            return
        self._steps += 1
        if opts.num_steps is not None and self._steps >= opts.num_steps:
            self._finish(opts)

    def _start(self, opts: ProfileOptions) -> None:
        if self.mirror is not None:
            self.mirror(("profile_start", opts))
        activities = [torch.profiler.ProfilerActivity.CPU] if "CPU" in opts.activities else []
        if "GPU" in opts.activities and torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._prof = torch.profiler.profile(activities=activities, record_shapes=opts.record_shapes,
                                            with_stack=opts.with_stack,
                                            profile_memory="MEM" in opts.activities)
        self._prof.start()
        log.info("profiling started (%s)", opts.profile_id)

    def _finish(self, opts: ProfileOptions) -> None:
        if self.mirror is not None:
            self.mirror(("profile_finish", opts))
        path = os.path.join(opts.output_dir, f"{opts.profile_id}-TP-{self.rank}.trace.json.gz")
        tmp = os.path.join(opts.output_dir, f".{opts.profile_id}-TP-{self.rank}.partial.gz")
        try:
            self._prof.stop()
            self._prof.export_chrome_trace(tmp)
            os.replace(tmp, path)
            self._result = path
            log.info("profile written to %s (%d decode steps)", path, self._steps)
        except (OSError, RuntimeError) as exc:
            self._result = APIError(500, f"could not write the trace: {exc}", kind="server_error")
            log.error("profile failed: %s", exc)
        with self._lock:
            self._opts, self._prof = None, None
            self._done.set()
