"""perfloop's own environment on an SSH host, from wheels fetched here (`perfloop host setup`).

GPU hosts often have no package registry, and the engine's own Python must not be changed. So the
host's interpreter is asked for its version and platform; `pip download` fetches, here, binary
wheels of perfloop's host-side dependencies for exactly that Python and platform, pinned to the
versions perfloop runs with here; they go up over SFTP and are unpacked (a wheel is a zip) into
`~/.cache/perfloop/env-cp<XY>/site` there, replaced at once by a rename. `tools/hosts/remote.py`
puts that folder first on its own `sys.path`; the server, the engine and its Python never see it.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path, PurePosixPath

from tools.errors import ConfigError, ToolError
from tools.hosts.client import remote_home
from tools.hosts.ssh import SSHHost
from tools.progress import report

HOST_DEPENDENCIES = ("pydantic", "GitPython", "msgspec", "regex")
"""What perfloop's tools need on a host besides the standard library (their dependencies follow)."""
PROBE = (
    "import json, platform, sys; "
    "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], 'machine': platform.machine(), "
    "'libc': platform.libc_ver()}))"
)
CHECK = "import pydantic, git, msgspec, regex; print(pydantic.VERSION)"
FIRST_USE = (
    "import pathlib, sys; p = pathlib.Path.home() / '.cache' / 'perfloop' / "
    "('env-cp%d%d' % sys.version_info[:2]) / 'site'; p.is_dir() and sys.path.insert(0, str(p)); " + CHECK
)
"""What tools/hosts/remote.py does first (its own environment on the path), then the imports."""


def env_dir(home: PurePosixPath, py_version: str) -> PurePosixPath:
    """The environment's folder on the host for one Python version (pure)."""
    return home / ".cache" / "perfloop" / f"env-cp{py_version.replace('.', '')}"


def requirements() -> list[str]:
    """The host dependencies pinned to the versions installed here."""
    return [f"{name}=={version(name)}" for name in HOST_DEPENDENCIES]


def platform_tags(machine: str, libc: list[str]) -> list[str]:
    """pip `--platform` values for a Linux host's machine and glibc (pure)."""
    name, ver = [*libc, "", ""][:2]
    if name != "glibc" or not ver:
        raise ConfigError(f"the host's Python reports no glibc ({libc}); only manylinux hosts are supported")
    minor = int(ver.split(".")[1])
    return [f"manylinux_2_{m}_{machine}" for m in range(17, minor + 1)] + [f"manylinux2014_{machine}"]


def pip_download_argv(dest: Path, py_version: str, tags: list[str]) -> list[str]:
    """The `pip download` command for the host's Python and platform (pure)."""
    abi = "cp" + py_version.replace(".", "")
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", str(dest)]
    argv += ["--python-version", py_version, "--implementation", "cp", "--abi", abi]
    for tag in tags:
        argv += ["--platform", tag]
    return argv + requirements()


def probe(host: SSHHost, python: str) -> dict:
    """The host Python's version, machine and libc."""
    done = host.run([python, "-c", PROBE], "/", timeout_s=60)
    if done.returncode != 0:
        raise ConfigError(
            f"cannot run {python} on {host.conn.endpoint}: {done.stderr.strip() or 'no output'}; "
            "pass the host's interpreter with --python"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def check(host: SSHHost, python: str, site: PurePosixPath) -> str | None:
    """pydantic's version when `python` imports the dependencies with `site` first; else None."""
    code = f"import sys; sys.path.insert(0, {str(site)!r}); {CHECK}"
    done = host.run([python, "-c", code], "/", timeout_s=60)
    return done.stdout.strip() if done.returncode == 0 else None


def setup(host: SSHHost, python: str, wheels: Path | None = None) -> PurePosixPath:
    """Create (or replace) perfloop's environment for `python` on the host; returns its site folder."""
    info = probe(host, python)
    dest = env_dir(remote_home(host), info["version"])
    with tempfile.TemporaryDirectory(prefix="perfloop-wheels-") as tmp:
        folder = wheels or Path(tmp)
        if wheels is None:
            report(f"fetching wheels for Python {info['version']} on {info['machine']} here")
            argv = pip_download_argv(folder, info["version"], platform_tags(info["machine"], info["libc"]))
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise ToolError(f"pip download failed: {last}; or pass --wheels DIR with the wheels")
        files = sorted(folder.glob("*.whl"))
        if not files:
            raise ConfigError(f"no wheels in {folder}")
        upload(host, python, files, dest)
    site = dest / "site"
    found = check(host, python, site)
    if found is None:
        raise ToolError(f"{python} on {host.conn.endpoint} cannot import perfloop's environment in {site}")
    return site


def upload(host: SSHHost, python: str, wheels: list[Path], dest: PurePosixPath) -> None:
    """Upload the wheels, unpack them into `<tmp>/site`, then swap `<tmp>` in as `dest`."""
    tmp = dest.with_name(f"{dest.name}.tmp-{secrets.token_hex(4)}")
    host.makedirs(tmp / "wheels")
    sftp = host.sftp()
    for w in wheels:
        report(f"uploading {w.name} to {host.conn.endpoint}")
        data = w.read_bytes()
        sftp.putfo(io.BytesIO(data), str(tmp / "wheels" / w.name), file_size=len(data), confirm=True)
    pins = "\n".join(requirements()) + "\n"
    digest = hashlib.sha256(b"".join(w.read_bytes() for w in wheels)).hexdigest()[:12]
    host.write_file_atomic(tmp / "requirements.txt", pins + f"# wheels sha256 {digest}\n")
    unpack = (
        "import sys, zipfile, pathlib; d = pathlib.Path(sys.argv[1]); "
        "[zipfile.ZipFile(w).extractall(d / 'site') for w in sorted((d / 'wheels').glob('*.whl'))]"
    )
    done = host.run([python, "-c", unpack, str(tmp)], "/", timeout_s=600)
    if done.returncode != 0:
        host.run(["rm", "-rf", "--", str(tmp)], "/")
        raise ToolError(f"unpacking the wheels on {host.conn.endpoint} failed: {done.stderr.strip()}")
    old = dest.with_name(f"{dest.name}.old-{secrets.token_hex(4)}")
    swap = '[ ! -e "$1" ] || mv -- "$1" "$3"; mv -- "$2" "$1" && rm -rf -- "$3" "$1/wheels"'
    done = host.run(["sh", "-c", swap, "sh", str(dest), str(tmp), str(old)], "/", timeout_s=120)
    if done.returncode != 0:
        raise ToolError(f"cannot put the environment in place at {dest}: {done.stderr.strip()}")


def ensure_env(host: SSHHost, python: str, ask: Callable[[str], bool] | None) -> bool:
    """On first use: whether `python` on the host can run perfloop's tools; if not and `ask`
    (the user's consent) says yes, set up perfloop's environment there first."""
    if host.run([python, "-c", FIRST_USE], "/", timeout_s=60).returncode == 0:
        return True
    question = (
        f"{python} on {host.conn.endpoint} lacks perfloop's dependencies (pydantic, GitPython, msgspec). "
        "Fetch wheels for it here and set up perfloop's own environment there (its own packages untouched)?"
    )
    if ask is None or not ask(question):
        return False
    setup(host, python)
    return True
