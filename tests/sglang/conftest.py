"""Real sglang wheels from the package registry, cached between runs, unpacked into git repos."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tools.workspace.git import GitWorkspace

CACHE = Path(os.environ.get("PERFLOOP_CACHE", Path.home() / ".cache" / "perfloop")) / "wheels"
NEEDED = (
    "_version.py",
    "srt/layers/attention/flashinfer_mla_backend.py",
    "srt/model_executor/model_runner.py",
    "srt/model_executor/runner/eager_runner.py",
    "benchmark/serving.py",
    "bench_serving.py",
)
"""Package-relative files a test repo gets (those the wheel has)."""


def wheel(version: str) -> Path:
    """The cached wheel of sglang==version, downloaded (no dependencies) on first use; fails loudly."""
    found = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        str(CACHE),
        f"sglang=={version}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    found = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    if done.returncode != 0 or not found:
        pytest.fail(
            f"could not download sglang=={version} from the package registry "
            f"(pip exit {done.returncode}): {done.stderr.strip()[-300:]}",
            pytrace=False,
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


BENCH_DEPS = {
    # What `import sglang.bench_serving` needs, read off each release's imports (its full dependency
    # list would pull in the GPU engine: torch, flashinfer, sgl-kernel); pins as the release pins them.
    "0.5.9": [
        "IPython",
        "aiohttp",
        "datasets",
        "numpy",
        "orjson",
        "pillow",
        "pybase64",
        "pydantic",
        "requests",
        "tqdm",
        "transformers==4.57.1",
    ],
    # 0.5.23's sglang.benchmark.serving imports the engine's configs and layers (torch, triton,
    # torchvision, tvm-ffi...): 5.5 GB, the CUDA torch build it pins (this machine has it on disk).
    "0.5.23": [
        "torch==2.14.1",
        "torchvision==0.29.1",
        "transformers==5.19.0",
        "tokenizers==0.23.2",
        "apache-tvm-ffi==0.1.11",
        "compressed-tensors==0.18.0",
        "sentencepiece==0.2.1",
        "IPython",
        "aiohttp",
        "datasets",
        "gguf",
        "msgspec",
        "numpy",
        "orjson",
        "pillow",
        "psutil",
        "pybase64",
        "pydantic",
        "pyzmq",
        "requests",
        "starlette",
        "tqdm",
    ],
}


def bench_python(version: str) -> Path:
    """A venv holding the real sglang==version (no deps) and what its bench_serving imports; cached."""
    venv = CACHE.parent / f"bench-venv-sglang-{version}"
    python, ready = venv / "bin" / "python", venv / ".perfloop-ready"
    if ready.is_file():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel(version))],
        [str(python), "-m", "pip", "install", "-q", *BENCH_DEPS[version]],
        [str(python), "-W", "ignore", "-c", "import sglang.bench_serving"],
    ]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.fail(
                f"setting up sglang {version}'s bench_serving failed at {cmd[1:4]} "
                f"(exit {done.returncode}): {done.stderr.strip()[-300:]}",
                pytrace=False,
            )
    ready.write_text(version)
    return python
