"""Real sglang wheels from the package registry, cached between runs, unpacked into git repos."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tools.git_workspace import GitWorkspace

CACHE = Path(os.environ.get("PERFLOOP_CACHE", Path.home() / ".cache" / "perfloop")) / "wheels"
NEEDED = ("_version.py", "srt/layers/attention/flashinfer_mla_backend.py", "srt/model_executor/model_runner.py",
          "srt/model_executor/runner/eager_runner.py", "benchmark/serving.py", "bench_serving.py")
"""Package-relative files a test repo gets (those the wheel has)."""


def wheel(version: str) -> Path:
    """The cached wheel of sglang==version, downloaded (no dependencies) on first use; fails loudly."""
    found = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--dest", str(CACHE), f"sglang=={version}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    found = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    if done.returncode != 0 or not found:
        pytest.fail(f"could not download sglang=={version} from the package registry "
                    f"(pip exit {done.returncode}): {done.stderr.strip()[-300:]}", pytrace=False)
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
