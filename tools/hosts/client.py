"""Running door tools on an SSH host: ship perfloop's packages there, run each call remotely.

`ensure_package` uploads the `tools` and `state` packages (their .py files) over SFTP into a folder
named by their content hash, once per version. `RemoteExecutor.call` runs `python -m tools.hosts.remote`
(tools/hosts/remote.py) there, turns its progress lines into local progress, re-raises its errors as the
same `tools.errors` type, and when the connection drops mid-call, reconnects, stops what the lost
call left running on the host and runs the call once more (every host tool is idempotent).
It lives apart from tools/hosts/remote.py so the host side never needs paramiko.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from pydantic import BaseModel

from state.door.calls import LaunchArgs
from tools.door.registry import ToolSpec
from tools.errors import ToolError, error_from
from tools.hosts.remote import PROGRESS, RESULT, encode_request, request_body
from tools.hosts.ssh import ConnectionLost, SSHHost
from tools.progress import report
from tools.secrets import outside
from tools.server import passed_env

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tools", "state")
CALL_TIMEOUT_S = 6 * 3600.0
"""Outer limit of one remote call; each tool enforces its own, shorter timeouts."""
MAX_ARG_CHARS = 64 * 1024
"""Longer requests travel as a file: a command line is at most 128 KiB."""


def package_files() -> dict[str, bytes]:
    """perfloop's `tools` and `state` sources, by POSIX path relative to the project root."""
    return {
        p.relative_to(ROOT).as_posix(): p.read_bytes()
        for pkg in PACKAGES
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def package_hash(files: dict[str, bytes]) -> str:
    """Content hash of a set of files (pure)."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return digest.hexdigest()


def remote_home(host: SSHHost) -> PurePosixPath:
    """The login user's home folder on the host (absolute)."""
    return PurePosixPath(host.sftp().normalize("."))


PRUNE_AFTER_DAYS = 7
"""Package versions on a host unused for longer than this are removed when a new one is uploaded."""


def ensure_package(host: SSHHost) -> PurePosixPath:
    """Upload this version of the packages to `~/.cache/perfloop/pkg-<hash12>` unless present.

    Each use touches the folder; a new upload removes the other versions unused for
    PRUNE_AFTER_DAYS, so upgrades do not pile up copies on the host."""
    files = package_files()
    dest = remote_home(host) / ".cache" / "perfloop" / f"pkg-{package_hash(files)[:12]}"
    if host.exists(dest):
        host.run(["touch", "-c", "--", str(dest)], "/")
        return dest
    prune = host.run(
        [
            "find",
            str(dest.parent),
            "-mindepth",
            "1",
            "-maxdepth",
            "1",
            "-name",
            "pkg-*",
            "-type",
            "d",
            "-mtime",
            f"+{PRUNE_AFTER_DAYS}",
            "-exec",
            "rm",
            "-rf",
            "--",
            "{}",
            "+",
        ],
        "/",
    )
    if prune.returncode != 0:
        report(f"could not prune old perfloop packages on {host.conn.endpoint}: {prune.stderr.strip()}")
    tmp = dest.with_name(f"{dest.name}.tmp-{secrets.token_hex(4)}")
    folders = sorted({str(tmp / rel).rsplit("/", 1)[0] for rel in files})
    done = host.run(["mkdir", "-p", "--", *folders], "/")
    if done.returncode != 0:
        raise ToolError(f"cannot create {tmp} on {host.conn.endpoint}: {done.stderr.strip()}")
    sftp = host.sftp()
    for rel, data in files.items():
        report(f"uploading perfloop's tools to {host.conn.endpoint}: {rel}")
        sftp.putfo(io.BytesIO(data), str(tmp / rel), file_size=len(data), confirm=True)
    try:
        sftp.posix_rename(str(tmp), str(dest))
    except OSError:
        if not host.exists(dest):  # not another process having just shipped the same version
            raise
        host.run(["rm", "-rf", "--", str(tmp)], "/")
    return dest


def forwarded_env(args: BaseModel) -> dict[str, str]:
    """For a server launch: the `launch.pass_env` values from perfloop's own environment.

    They travel in a 0600 request file that the host deletes once read, never in the recorded
    input, and are set in the remote tool's environment, where `server.launch` picks them up.
    """
    if not isinstance(args, LaunchArgs):
        return {}
    return passed_env(args.launch.pass_env)


class RemoteExecutor:
    """Runs host tools on one SSH host with the interpreter `python`, from `pkg_dir`."""

    def __init__(
        self, host: SSHHost, python: str, pkg_dir: PurePosixPath, log_path: Path | None = None
    ) -> None:
        self.host, self.python, self.pkg_dir, self.log_path = host, python, pkg_dir, log_path
        self.reconnects = 0

    def call(self, spec: ToolSpec, args: BaseModel) -> BaseModel:
        """Run a host tool on the host; after a dropped connection, reconnect and run it again."""
        name = spec.name
        try:
            return self._call_once(spec, args)
        except ConnectionLost as lost:
            self.host.conn.reconnect()
            if lost.pgid is not None:  # the lost attempt may still run there: stop it first
                self.host.stop_group(lost.pgid, 5.0)
            self.reconnects += 1
            self._log(
                f"{name}: connection lost ({lost}); reconnected (reconnect "
                f"#{self.reconnects}), stopped the interrupted attempt, running it again"
            )
            return self._call_once(spec, args)

    def _call_once(self, spec: ToolSpec, args: BaseModel) -> BaseModel:
        name, payload, env = spec.name, args.model_dump(mode="json"), forwarded_env(args)
        arg = encode_request(request_body(spec, payload))
        if len(arg) > MAX_ARG_CHARS or env:  # secrets never go on a command line (visible in ps)
            path = self.pkg_dir / "requests" / f"{secrets.token_hex(8)}.json"
            self.host.makedirs(path.parent)
            self.host.write_file_atomic(path, json.dumps(request_body(spec, payload, env)), mode=0o600)
            arg = f"@{path}"
        done = self.host.run(
            [self.python, "-m", "tools.hosts.remote", arg],
            str(self.pkg_dir),
            timeout_s=CALL_TIMEOUT_S,
            on_line=self._line,
        )
        results = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT)]
        if not results:
            last = [ln for ln in done.stderr.splitlines() if ln.strip() and not ln.startswith(PROGRESS)]
            raise ToolError(
                f"{name} on {self.host.conn.endpoint} ended (exit code {done.returncode}) "
                f"without a result: {outside(last[-1]) if last else 'no output'}; check that "
                f"{self.python} runs there"
            )
        result = json.loads(results[-1][len(RESULT) :])
        if "error" in result:
            raise error_from(result["error"])
        return spec.output_type.model_validate(result["output"])

    def _line(self, stream: str, line: str) -> None:
        if stream == "stderr" and line.startswith(PROGRESS):
            report(line[len(PROGRESS) :])

    def _log(self, message: str) -> None:
        report(message)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a") as f:
                f.write(f"{datetime.now(UTC).isoformat()} {message}\n")
