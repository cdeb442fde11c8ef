"""Inputs and outputs of the tools that are not domain values of their own."""

from pathlib import Path
from typing import Literal

from pydantic import Field

from state.base import Model
from state.config.target import LaunchConfig, MeasureConfig
from state.engines.process import ServerHandle
from state.engines.sglang import HookSite, SglangLayout
from state.engines.ssh import SSHHostConfig
from state.engines.workspace import CommitInfo, InstrumentationRecord, PatchPolicy
from state.measurement.measure import Measurement
from state.measurement.workload import WorkloadConfig


class LaunchArgs(Model):
    """Start the target server and wait until it is healthy."""

    repo: Path
    """Working directory of the launch command."""
    launch: LaunchConfig
    """Launch command and limits."""
    python: str
    """Interpreter substituted for `{python}` in the command."""
    log_path: Path
    """Server log file."""
    tree_sha256: str
    """Fingerprint of the tree being launched."""
    instrumented: bool
    """Whether the profiler instrumentation is in the tree."""
    profile_dir: Path | None
    """PERFLOOP_PROFILE_DIR for the instrumentation, if any."""
    launch_number: int
    """Ordinal of this launch in the session."""
    pid_file: Path | None = None
    """Where the server's pid/pgid is written right after it is spawned (found again after a crash)."""


class ServerArgs(Model):
    """Refers to a running server."""

    server: ServerHandle
    """The server."""
    grace_s: float = 10.0
    """Seconds between SIGTERM and SIGKILL when stopping."""


class PidFileArgs(Model):
    """A session's server pid file."""

    pid_file: Path
    """The file `server.launch` writes at spawn."""
    repo: Path
    """The repo the server runs in (a recorded process elsewhere is not ours)."""
    grace_s: float = 10.0
    """Seconds between SIGTERM and SIGKILL."""


class ServerStatus(Model):
    """Whether a server is alive and healthy."""

    alive: bool
    """Some member of its process group is running (zombies excluded)."""
    healthy: bool
    """Its health endpoint answers 200."""
    killed: bool = False
    """Stopping it needed SIGKILL."""


class MeasureArgs(Model):
    """Run the measurement workload against a server."""

    base_url: str
    """Server base URL."""
    model: str
    """Model name for requests."""
    config: MeasureConfig
    """The workload."""
    label: str
    """Label of the measurement."""
    tree_sha256: str
    """Fingerprint of the tree the server runs."""
    bench_serving: Literal["auto", "always", "never", "both"] = "never"
    """Whether to measure with the engine's benchmark: the config's choice, `never` where `auto`
    does not apply (targets other than SGLang)."""
    engine: str = "sglang"
    """Whose serving benchmark, by engine name (tools/engines): `sglang.bench_serving`, `vllm bench
    serve`, or a registered engine's own."""
    python: str = ""
    """Interpreter on the host that the target runs with (`{python}` in the benchmark's python)."""
    repo: str = ""
    """The target repo on the host, substituted for `{repo}` in the benchmark's tokenizer path."""
    workload: WorkloadConfig | None = None
    """`[workload]`: measure `config.repeats` windows at its concurrency instead of the prompts
    one at a time."""


class MeasureResult(Model):
    """Output of the measure tool."""

    measurement: Measurement
    """The measurement."""


class PairArgs(Model):
    """Measure two servers with one workload, requests alternating between them."""

    reference: MeasureArgs
    """The reference server and its workload (perfloop's client; `bench_serving` is ignored)."""
    candidate: MeasureArgs
    """The candidate server; its workload must equal the reference's."""


class PairResult(Model):
    """Both arms of one interleaved batch, measured over the same wall-clock span."""

    reference: Measurement
    """The reference server's requests."""
    candidate: Measurement
    """The candidate server's requests."""


class ProfileArgs(Model):
    """Take one profile of the running server."""

    method: Literal["patch", "api"]
    """Instrumentation trigger or /start_profile."""
    base_url: str
    """Server base URL."""
    model: str
    """Model name for requests."""
    out_dir: Path
    """Directory for this profile's files."""
    profile_dir: Path | None
    """The server's PERFLOOP_PROFILE_DIR (patch method)."""
    profile_id: str
    """Unique id of this profile."""
    warmup_steps: int
    """Steps discarded before recording (patch method)."""
    active_steps: int
    """Steps recorded."""
    prompt: str
    """Prompt of the profiling request."""
    timeout_s: float
    """Seconds to wait for the trace."""
    tp_size: int = 1
    """Ranks that each write a trace (both methods; rank 0 alone when 1)."""
    sglang_version: str | None = None
    """SGLang release, to shape the /start_profile body (e.g. `start_step`); None for other kinds."""
    vllm_trace_dir: Path | None = None
    """vLLM (api method): the server's `--profiler-config.torch_profiler_dir`, where its worker
    writes the trace after `/stop_profile`; None for other kinds."""


class ProfileFiles(Model):
    """Files a profile produced."""

    trace_path: Path
    """Chrome trace (.json.gz), or the folder of one trace per rank."""
    summary_path: Path | None
    """key_averages table, when the method writes one."""
    trace_sha256: str
    """Hash of the trace."""
    device: str
    """`cpu` or `cuda`."""
    active_tokens: int
    """prompt + completion tokens of the profiling request."""


class PathArgs(Model):
    """A single file path."""

    path: Path
    """The file."""


class ClockArgs(Model):
    """Ask the time (no input)."""


class ClockResult(Model):
    """The time on the machine perfloop runs on."""

    epoch_s: float
    """Seconds since the epoch."""


class RepoArgs(Model):
    """A target repo."""

    repo: Path
    """Top-level directory of the checkout."""


class CopyTreeArgs(Model):
    """Make a git checkout from a source tree (the embedded demo target)."""

    src: Path
    """Source tree."""
    dest: Path
    """New repository directory."""


class BranchArgs(RepoArgs):
    """Create or switch to a branch, keeping the working tree."""

    name: str
    """Branch name."""
    start_point: str | None = None
    """Commit a new branch starts at (default HEAD)."""


class LeaveBranchArgs(RepoArgs):
    """Give the repo back as it was found: leave and delete a session branch that holds no commit."""

    name: str
    """The session branch."""
    back_to: str | None
    """The branch the session started on (None: HEAD was detached at `head_sha`)."""
    head_sha: str
    """The commit the session started at; a branch that moved past it is kept."""


class InstrumentArgs(RepoArgs):
    """Insert the dormant profiler into a file's ModelRunner.forward_decode."""

    relpath: str
    """Repo-relative file."""
    class_name: str = "ModelRunner"
    """Class holding the decode method."""
    method: str = "forward_decode"
    """The decode method."""


class RemoveInstrumentationArgs(RepoArgs):
    """Remove exactly the instrumentation hunks recorded at insertion."""

    record: InstrumentationRecord
    """What was inserted."""


class ApplyArgs(RepoArgs):
    """Apply a patch and commit it (only it) on the current branch."""

    diff: str
    """Unified diff."""
    subject: str
    """Commit subject."""
    trailers: dict[str, str]
    """Commit trailers (Perfloop-Session, Perfloop-Playbook, Perfloop-Iteration)."""
    policy: PatchPolicy = Field(default_factory=PatchPolicy)
    """What the patch gate lets through (size cap, binary hunks)."""


class CommitArgs(RepoArgs):
    """Refers to a commit perfloop made."""

    commit: CommitInfo
    """The commit."""


class SglangSite(Model):
    """Where an SGLang checkout keeps what the loop touches."""

    layout: SglangLayout
    """Package location and release."""
    hook: HookSite
    """The eager decode method to instrument."""


class Done(Model):
    """An acknowledgement with a note."""

    note: str = ""
    """What happened."""


class FetchArgs(Model):
    """Copy a file or a flat folder of a remote host to this machine."""

    host: SSHHostConfig
    """The host."""
    remote: Path
    """File or folder on the host."""
    local: Path
    """Where the copy goes here."""


class PushTreeArgs(Model):
    """Upload a local source tree (without __pycache__) to a folder of a remote host."""

    host: SSHHostConfig
    """The host."""
    src: Path
    """Local tree."""
    dest: Path
    """Folder on the host (created; files in it are replaced)."""
