"""Taking a profile of a running server, two ways, and reading it back.

`patch`: the server runs perfloop's dormant instrumentation (tools/workspace/instrumentation.py); writing
`request.json` into its PERFLOOP_PROFILE_DIR arms torch.profiler for the next decode steps, and the
instrumentation writes `<id>/trace.json.gz`, `<id>/summary.txt` and finally `<id>/done.json` (at
TP > 1 each other rank R the same under `<id>/rank<R>/`; the traces are then linked into `<id>/ranks/`).
`api`: SGLang's `/start_profile` with `num_steps`; the server writes `<id>-TP-<rank>.trace.json.gz`.
vLLM's `/start_profile` and `/stop_profile` around one request; its worker writes the trace into its
`--profiler-config.torch_profiler_dir`.

The patch method takes a trace only whole (`whole_trace`; its files are written atomically, then
`done.json`): a server whose write of it failed (a full disk, a file size limit) may still report
it written, empty or cut off (torch's export does), and that is a TraceError here, not a profile.
(An API method's trace may be found while the server still writes it: it is read later, by
`diagnose`, whose reader names a trace that is empty or cut off.)
"""

from __future__ import annotations

import gzip
import hashlib
import json
import secrets
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from state.door.calls import PathArgs, ProfileArgs, ProfileFiles
from state.profiling.profile import ProfileSummary
from tools.client.stream import chat_body, stream_completion
from tools.door import tool
from tools.door.faults import fault_point
from tools.errors import TraceError
from tools.hosts.local import write_file_atomic
from tools.http import post_json
from tools.progress import report
from tools.sglang.layout import parse_version
from tools.sglang.server import rank_traces, start_profile_body
from tools.vllm.trace import decode_phases_of

T = TypeVar("T")

_POLL_S = 0.2


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


WRITE_FAILED = "the server could not write it (a full disk, or a file size limit); free space or raise the limit, and run again"


def whole_trace(path: Path) -> Path:
    """`path` when it holds one whole JSON document (a `{...}` object, gzip'd or not); else
    TraceError naming it: empty, cut off, or gzip data that ends early."""
    first = last = b""
    size = 0
    try:
        with gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                size += len(chunk)
                first = first or chunk.lstrip()[:1]
                last = chunk.rstrip()[-1:] or last
    except (OSError, EOFError, zlib.error) as err:
        raise TraceError(
            f"{path}: the trace's data ends early or is corrupt ({err}): {WRITE_FAILED}"
        ) from None
    if not first:
        raise TraceError(f"{path}: the trace is empty: {WRITE_FAILED}")
    if (first, last) != (b"{", b"}"):
        raise TraceError(
            f"{path}: the trace is cut off after {size} bytes (not a whole JSON document): {WRITE_FAILED}"
        )
    return path


def attempt_id(profile_id: str) -> str:
    """A fresh id per attempt, so a re-run after a crash never picks up a stale or late profile."""
    return f"{profile_id}-{secrets.token_hex(3)}"


def _wait_for(describe: str, find: Callable[[], T | None], timeout_s: float) -> T:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        found = find()
        if found:
            return found
        report(f"waiting for {describe} ({time.monotonic() - t0:.0f}s)")
        time.sleep(_POLL_S)
    raise TraceError(
        f"no {describe} after {timeout_s:.0f}s; check the server log and that "
        "enough decode steps ran (raise max_tokens or lower active_steps)"
    )


def _active_tokens(usage: dict, prompt: str, completion_tokens: int) -> int:
    if usage.get("prompt_tokens") is not None and usage.get("completion_tokens") is not None:
        return int(usage["prompt_tokens"]) + int(usage["completion_tokens"])
    return len(prompt.encode()) + completion_tokens  # byte-level upper bound when usage is absent


def _profile_patch(args: ProfileArgs) -> ProfileFiles:
    if args.profile_dir is None:
        raise TraceError(
            "patch profiling needs a server launched with PERFLOOP_PROFILE_DIR; "
            "relaunch the session with the instrumentation in place"
        )
    profile_dir = args.profile_dir
    stream_completion(args.base_url, chat_body(args.model, args.prompt, 8), args.timeout_s)
    pid = attempt_id(args.profile_id)
    request = {"id": pid, "warmup_steps": args.warmup_steps, "active_steps": args.active_steps}
    write_file_atomic(profile_dir / "request.json", json.dumps(request))  # replaces a stale one
    fault_point("profile:requested")
    steps = args.warmup_steps + args.active_steps + 4
    arrivals, _, usage = stream_completion(
        args.base_url, chat_body(args.model, args.prompt, steps), args.timeout_s
    )
    out = profile_dir / pid

    def done() -> dict | None:
        for err in (out / "error.txt", profile_dir / "error.txt"):
            if err.exists():
                raise TraceError(f"the instrumentation failed ({err}): {err.read_text()[:300]}")
        return json.loads((out / "done.json").read_text()) if (out / "done.json").exists() else None

    info = _wait_for(f"{out / 'done.json'}", done, args.timeout_s)
    trace, digest = out / "trace.json.gz", sha256_file(whole_trace(out / "trace.json.gz"))
    if args.tp_size > 1:
        trace, digest = _rank_folder(out, pid, args)
    return ProfileFiles(
        trace_path=trace,
        summary_path=(trace if args.tp_size > 1 else out) / "summary.txt",
        trace_sha256=digest,
        device=str(info.get("device", "cpu")),
        active_tokens=_active_tokens(usage, args.prompt, len(arrivals)),
    )


def _rank_folder(out: Path, pid: str, args: ProfileArgs) -> tuple[Path, str]:
    """Patch method at TP > 1: wait for every other rank's `rank<R>/done.json`, then link each
    rank's trace into `<id>/ranks/<id>-TP-<R>.trace.json.gz` (the folder that is read and merged,
    and fetched from an SSH host), rank 0's summary.txt beside them."""
    others = [out / f"rank{r}" for r in range(1, args.tp_size)]
    _wait_for(
        f"the trace of every rank under {out}",
        lambda: all((d / "done.json").exists() for d in others),
        args.timeout_s,
    )
    folder = out / "ranks"
    folder.mkdir(exist_ok=True)
    for rank, src in enumerate([out, *others]):
        dest = folder / f"{pid}-TP-{rank}.trace.json.gz"
        if not dest.exists():
            dest.hardlink_to(src / "trace.json.gz")
    if not (folder / "summary.txt").exists():
        (folder / "summary.txt").hardlink_to(out / "summary.txt")
    files = [whole_trace(p) for p in sorted(folder.glob("*-TP-*.trace.json.gz"))]
    return folder, hashlib.sha256("".join(sha256_file(p) for p in files).encode()).hexdigest()


def _api_body(args: ProfileArgs, out_dir: Path, pid: str) -> dict:
    if args.sglang_version is None:
        return {
            "output_dir": str(out_dir),
            "num_steps": args.active_steps,
            "activities": ["CPU", "GPU"],
            "profile_id": pid,
            "record_shapes": True,
        }
    return start_profile_body(
        out_dir, pid, args.active_steps, parse_version(args.sglang_version), start_step=args.warmup_steps
    )


def _profile_api(args: ProfileArgs) -> ProfileFiles:
    pid = attempt_id(args.profile_id)
    out_dir = args.out_dir / pid
    out_dir.mkdir(parents=True, exist_ok=True)
    body = _api_body(args, out_dir, pid)
    code, text = post_json(args.base_url + "/start_profile", body)
    if code != 200:  # e.g. a profile started by a killed attempt is still running: stop it, retry once
        post_json(args.base_url + "/stop_profile", {})
        code, text = post_json(args.base_url + "/start_profile", body)
    if code != 200:
        raise TraceError(
            f"/start_profile answered HTTP {code}: {text[:200]}; does this server "
            "support the profiling API? try --profile-method patch"
        )
    arrivals, _, usage = stream_completion(
        args.base_url,
        chat_body(args.model, args.prompt, args.warmup_steps + args.active_steps + 4),
        args.timeout_s,
    )

    def all_ranks() -> dict[int, Path] | None:
        try:
            return rank_traces(out_dir, pid, args.tp_size)
        except TraceError:
            return None

    ranks = _wait_for(f"{args.tp_size} rank trace(s) in {out_dir}", all_ranks, args.timeout_s)
    path = ranks[0] if args.tp_size == 1 else out_dir
    digest = hashlib.sha256("".join(sha256_file(p) for _, p in sorted(ranks.items())).encode())
    return ProfileFiles(
        trace_path=path,
        summary_path=None,
        trace_sha256=sha256_file(path) if args.tp_size == 1 else digest.hexdigest(),
        device="unknown",
        active_tokens=_active_tokens(usage, args.prompt, len(arrivals)),
    )


def _profile_vllm(args: ProfileArgs, trace_dir: Path) -> ProfileFiles:
    """vLLM's API method: `/start_profile`, one request of warm-up + active + 4 tokens,
    `/stop_profile`; its worker then writes `<rank>.<time>.pt.trace.json.gz` into `trace_dir` (the
    step windows come from its `execute_context_*` markers, tools/trace/analyses/windows.py)."""
    trace_dir.mkdir(parents=True, exist_ok=True)
    before = set(trace_dir.glob("*.pt.trace.json*"))
    code, text = post_json(args.base_url + "/start_profile", {})
    if code != 200:  # e.g. a profile started by a killed attempt is still running: stop it, retry once
        post_json(args.base_url + "/stop_profile", {}, timeout_s=args.timeout_s)
        code, text = post_json(args.base_url + "/start_profile", {})
    if code != 200:
        raise TraceError(
            f"/start_profile answered HTTP {code}: {text[:200]}; launch vLLM with "
            "--profiler-config.profiler=torch --profiler-config.torch_profiler_dir=DIR"
        )
    steps = args.warmup_steps + args.active_steps + 4
    arrivals, _, usage = stream_completion(
        args.base_url, chat_body(args.model, args.prompt, steps), args.timeout_s
    )
    code, text = post_json(args.base_url + "/stop_profile", {}, timeout_s=args.timeout_s)
    if code != 200:
        raise TraceError(f"/stop_profile answered HTTP {code}: {text[:200]}")

    def written() -> Path | None:
        new = sorted(set(trace_dir.glob("*.pt.trace.json*")) - before, key=lambda p: p.stat().st_mtime)
        return new[-1] if new and not new[-1].name.endswith(".tmp") else None

    path = _wait_for(f"a new trace in {trace_dir}", written, args.timeout_s)
    return ProfileFiles(
        trace_path=path,
        summary_path=None,
        trace_sha256=sha256_file(path),
        device="cpu",
        active_tokens=_active_tokens(usage, args.prompt, len(arrivals)),
    )


@tool("profile.take")
def take(args: ProfileArgs) -> ProfileFiles:
    """Take one profile of the running server by the chosen method."""
    if args.method == "api" and args.vllm_trace_dir is not None:
        return _profile_vllm(args, args.vllm_trace_dir)
    return _profile_patch(args) if args.method == "patch" else _profile_api(args)


@tool("profile.read", where="local")
def read(args: PathArgs) -> ProfileSummary:
    """Read a Chrome trace (or a folder of one per rank, merged) into per-op statistics."""
    from tools.trace import read_profiles  # here, not at the top: numpy need not be on SSH hosts

    summary = read_profiles([args.path])
    if summary.step_source is not None and summary.step_source.startswith("vLLM"):
        summary = summary.model_copy(update={"decode_phases": decode_phases_of(Path(args.path))})
    return summary
