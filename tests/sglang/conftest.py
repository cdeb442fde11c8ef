"""Real sglang wheels from the package registry, cached between runs, unpacked into git repos."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.errors import ToolError
from tools.sglang import wheels
from tools.sglang.wheels import cache
from tools.workspace.git import GitWorkspace

CACHE = cache()


def wheel(version: str) -> Path:
    """The cached wheel of sglang==version (tools/sglang/wheels.py); fails the test loudly."""
    try:
        return wheels.wheel(version)
    except ToolError as exc:
        pytest.fail(str(exc), pytrace=False)


def unpack(version: str, dest: Path, package_dir: str = "python/sglang") -> GitWorkspace:
    """A git repo at dest/repo holding the wheel's files perfloop reads (tools/sglang/wheels.py)."""
    wheel(version)
    return wheels.unpack(version, dest, package_dir)


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
