"""The target's probe, run on a model's candidate patch: `code.probe`.

A target may declare a quick check (`[proposer.probe]`: a unit test, an equivalence harness); the
model may run it on its candidate before it answers. The run never touches the session's tree:
the repo's HEAD is checked out in a scratch `git worktree` in a temporary folder outside the repo,
the tree's uncommitted changes copied over as the patch will meet them (tracked changes and
untracked files git does not ignore, perfloop's instrumentation lines left out, deleted files
deleted), the candidate applied there, the command run in its root in its own process group with a time
limit (past it the whole group is killed), and the worktree removed again (`git worktree remove`,
then `prune`), whatever happened. What comes back is the end of the output, bounded and with
secrets masked. The command runs the model's code, so it gets a minimal environment
(`probe_env`): the variables a build or a test needs (PATH, HOME, locale, Python, CUDA/ROCm and
thread settings) and nothing named like a key, token, password, secret or credential, no
`PERFLOOP_*` (the store URL and its password), no SSH agent, no value holding a URL's password.
Run where the repo lives (`where="host"`); recorded like every door call, so a replay answers it
without running.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from state.proposers.llm_tools import ProbeArgs, ProbeResult
from tools.door import tool
from tools.llm.code import MARKER, inside
from tools.llm.redact import redact
from tools.secrets import looks_secret
from tools.workspace.commands import APPLY

MAX_OUTPUT = 6000
"""Characters of the output's end sent back."""
KEPT_ENV = re.compile(
    r"PATH|HOME|USER|LOGNAME|SHELL|LANG|LANGUAGE|TZ|TMPDIR|TERM|PWD|LD_LIBRARY_PATH|VIRTUAL_ENV"
    r"|(LC_|PYTHON|CONDA_|CUDA_|NVIDIA_|HIP_|ROCM_|ROCR_|HSA_|NCCL_|OMP_|MKL_|OPENBLAS_|TORCH_|TRITON_|XDG_"
    r"|HF_)[A-Z0-9_]*"
)
"""The variables of perfloop's environment a probe gets (then less those named like secrets)."""
URL_PASSWORD = re.compile(r"://[^/@\s]*:[^/@\s]*@")


def probe_env(environ: dict[str, str], drop: list[str]) -> dict[str, str]:
    """The environment the probe's command runs with (see the module doc; pure)."""
    return {
        k: v
        for k, v in environ.items()
        if KEPT_ENV.fullmatch(k)
        and not looks_secret(k)
        and k not in drop
        and not k.startswith(("PERFLOOP_", "SSH_"))
        and not URL_PASSWORD.search(v)
    }


def _git(repo: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], input=stdin, text=True, capture_output=True)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, tree: Path) -> str:
    data = path.read_bytes() if path.exists() else b""
    text = data[-4 * MAX_OUTPUT :].decode(errors="replace").replace(str(tree) + os.sep, "")
    if len(text) > MAX_OUTPUT or len(data) > 4 * MAX_OUTPUT:
        text = f"[... {len(data)} bytes in all; the end:]\n" + text[-MAX_OUTPUT:]
    return redact(text)


def _copy_changes(repo: Path, tree: Path) -> None:
    """The working tree's uncommitted changes into the worktree of its HEAD, instrumentation lines
    left out: the tree a patch meets once perfloop's instrumentation is removed."""
    listed = _git(repo, "diff", "--name-only", "-z", "HEAD").stdout.split("\0")
    listed += _git(repo, "ls-files", "--others", "--exclude-standard", "-z").stdout.split("\0")
    root = repo.resolve()
    for rel in filter(None, listed):
        src, dst = repo / rel, tree / rel
        if src.exists() and not inside(root, src):  # a symlink leading out: not carried over
            continue
        if not src.is_file():
            dst.unlink(missing_ok=True)
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = src.read_bytes()
        if MARKER.encode() in data:
            data = b"".join(line for line in data.splitlines(keepends=True) if MARKER.encode() not in line)
        dst.write_bytes(data)


def run(args: ProbeArgs) -> ProbeResult:
    """Check out HEAD in a scratch worktree, apply `args.diff`, run `args.argv` there (see the
    module doc); the worktree is gone when this returns."""
    scratch = Path(tempfile.mkdtemp(prefix="perfloop-probe-"))
    tree, log = scratch / "tree", scratch / "output.txt"
    try:
        added = _git(args.repo, "worktree", "add", "--detach", "--quiet", str(tree), "HEAD")
        if added.returncode != 0:
            return ProbeResult(applied=False, exit_code=None, output=redact(f"no worktree: {added.stderr}"))
        _copy_changes(args.repo, tree)
        applied = _git(tree, *APPLY, "-", stdin=args.diff)
        if applied.returncode != 0:
            why = applied.stderr.strip() or "git apply failed"
            return ProbeResult(
                applied=False, exit_code=None, output=redact(f"the patch did not apply: {why}")
            )
        env = probe_env(dict(os.environ), args.drop_env)
        t0 = time.perf_counter()
        with open(log, "wb") as out:
            try:
                proc = subprocess.Popen(
                    args.argv,
                    cwd=tree,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            except OSError as exc:
                return ProbeResult(
                    applied=True, exit_code=None, output=redact(f"cannot run {args.argv[0]}: {exc}")
                )
            timed_out = False
            try:
                code: int | None = proc.wait(timeout=args.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out, code = True, None
                _kill_group(proc.pid)
                proc.wait()
            _kill_group(proc.pid)  # whatever it left running in the background
        seconds = time.perf_counter() - t0
        output = _tail(log, tree)
        if timed_out:
            output += f"\n[killed after {args.timeout_s:g} s: the probe's time limit]"
        return ProbeResult(applied=True, exit_code=code, timed_out=timed_out, seconds=seconds, output=output)
    finally:
        _git(args.repo, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(scratch, ignore_errors=True)
        _git(args.repo, "worktree", "prune")


@tool("code.probe")
def probe(args: ProbeArgs) -> ProbeResult:
    """The target's probe on a candidate patch, in a scratch worktree (see the module doc)."""
    return run(args)
