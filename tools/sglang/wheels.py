"""Real SGLang releases from the package registry: the wheel of a release, downloaded once (no
dependencies) and cached, and a git repo holding the files of it that perfloop reads.

tests/sglang reads real releases through these, and so does the eval's `sglang-port` task
(agent/proposer/harness/porting.py), so a fresh machine fetches a wheel the same way for both.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tools.errors import ToolError
from tools.workspace.git import GitWorkspace

NEEDED = (
    "_version.py",
    "srt/layers/attention/flashinfer_mla_backend.py",
    "srt/model_executor/model_runner.py",
    "srt/model_executor/runner/eager_runner.py",
    "benchmark/serving.py",
    "bench_serving.py",
)
"""Package-relative files a repo gets (those the wheel has)."""


def cache() -> Path:
    """Where wheels are kept: `$PERFLOOP_CACHE/wheels`, else `~/.cache/perfloop/wheels`."""
    return Path(os.environ.get("PERFLOOP_CACHE", Path.home() / ".cache" / "perfloop")) / "wheels"


def wheel(version: str) -> Path:
    """The cached wheel of sglang==version, downloaded with pip (no dependencies) on first use;
    ToolError naming pip's complaint when it cannot be had."""
    where = cache()
    found = sorted(where.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    where.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    done = subprocess.run(
        [*cmd, "--dest", str(where), f"sglang=={version}"], capture_output=True, text=True, timeout=300
    )
    found = sorted(where.glob(f"sglang-{version}-*.whl"))
    if done.returncode != 0 or not found:
        raise ToolError(
            f"could not download sglang=={version} from the package registry "
            f"(pip exit {done.returncode}): {done.stderr.strip()[-300:]}"
        )
    return found[0]


def unpack(version: str, dest: Path, package_dir: str = "python/sglang") -> GitWorkspace:
    """A git repo at dest/repo holding the NEEDED files of the wheel under `package_dir` (one commit)."""
    src = dest / "src"
    with zipfile.ZipFile(wheel(version)) as whl:
        names = set(whl.namelist())
        for inside in NEEDED:
            if f"sglang/{inside}" in names:
                target = src / package_dir / inside
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(whl.read(f"sglang/{inside}"))
    return GitWorkspace.create_from_tree(src, dest / "repo")
