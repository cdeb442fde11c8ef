"""The installed vLLM package's Python source, for the tests that read or copy its files.

The vLLM tier's engine venv is `.venv-vllm` at the repo root (`make vllm`); a missing venv fails
the test with the command that makes it (never a skip).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools.vllm.target import VENV
from tools.workspace.git import GitWorkspace


def vllm_package() -> Path:
    """The `vllm` package folder inside the engine venv's site-packages."""
    found = sorted(VENV.glob("lib/python3*/site-packages/vllm/v1"))
    if not found:
        pytest.fail(f"no vLLM package in {VENV}: run `make vllm` first", pytrace=False)
    return found[-1].parent


def repo_of(files: list[str], dest: Path) -> GitWorkspace:
    """A git repo at `dest` holding these package-relative files of the installed vLLM at
    `vllm/<file>`, committed: the target's checkout, cut to what a test reads."""
    src = vllm_package()
    tree = dest / "src"
    for rel in files:
        (tree / "vllm" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, tree / "vllm" / rel)
    return GitWorkspace.create_from_tree(tree, dest / "repo")
