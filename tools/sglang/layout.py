"""Finding SGLang's files in a target repo: an upstream checkout or an installed site-packages tree.

Pure path logic plus small file reads; no git, no network. The repo-relative paths returned here
are what the instrumentation and the playbook patches operate on.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from state.engines.sglang import HookSite, SglangLayout
from tools.errors import ConfigError

PACKAGE_DIRS = (("checkout", "python/sglang"), ("site-packages", "sglang"))
"""Where the package may lie in a repo, first match wins: upstream layout, then an installed tree."""

HOOK_SITES = (
    ("srt/model_executor/model_runner.py", "ModelRunner", "forward_decode"),  # up to 0.5.10
    ("srt/model_executor/runner/eager_runner.py", "EagerRunner", "_execute_decode"),  # 0.5.14 on
)
"""Candidate eager-decode methods for the profiler hook, oldest layout first."""

_VERSION_PY = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)
_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, int, int]:
    """`0.5.23`, `0.5.15.post1` or `v0.5.9` -> (0, 5, 23); ConfigError for anything else (pure)."""
    found = _RELEASE.search(text)
    if not found:
        raise ConfigError(f"cannot read an X.Y.Z release from sglang version {text!r}")
    return int(found[1]), int(found[2]), int(found[3])


def _version_from_files(repo: Path, package_dir: str) -> str | None:
    """The release named by `_version.py`, `python/pyproject.toml` or a `sglang-*.dist-info` folder."""
    version_py = repo / package_dir / "_version.py"
    if version_py.is_file() and (found := _VERSION_PY.search(version_py.read_text(encoding="utf-8"))):
        return found[1]
    pyproject = repo / Path(package_dir).parent / "pyproject.toml"
    if pyproject.is_file():
        version = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("version")
        if isinstance(version, str):
            return version
    dist = sorted((repo / Path(package_dir).parent).glob("sglang-*.dist-info"))
    return dist[-1].name[len("sglang-") : -len(".dist-info")] if dist else None


def locate(repo: Path) -> SglangLayout:
    """Where `sglang/srt` lies in `repo` and which release it is; ConfigError naming what is missing."""
    for kind, package_dir in PACKAGE_DIRS:
        if (repo / package_dir / "srt").is_dir():
            version = _version_from_files(repo, package_dir)
            if version is None:
                raise ConfigError(
                    f"found {package_dir}/ in {repo} but no version (no _version.py, "
                    "pyproject.toml version or sglang-*.dist-info); build or install it once"
                )
            parse_version(version)
            return SglangLayout(kind=kind, package_dir=package_dir, version=version)
    raise ConfigError(
        f"{repo} holds neither python/sglang/srt (an SGLang checkout) nor sglang/srt "
        "(a site-packages tree); pass the checkout root as --repo"
    )


def _has_method(source: str, class_name: str, method: str) -> bool:
    """Whether `source` has a top-level class with a plain (non-async) method of that name (pure)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return any(isinstance(n, ast.FunctionDef) and n.name == method for n in node.body)
    return False


def hook_site(repo: Path, layout: SglangLayout) -> HookSite:
    """The eager-decode method to instrument in this release (first candidate present)."""
    for inside, class_name, method in HOOK_SITES:
        path = repo / layout.rel(inside)
        if path.is_file() and _has_method(path.read_text(encoding="utf-8"), class_name, method):
            return HookSite(relpath=layout.rel(inside), class_name=class_name, method=method)
    tried = ", ".join(f"{c}.{m} in {layout.rel(f)}" for f, c, m in HOOK_SITES)
    raise ConfigError(
        f"sglang {layout.version}: no eager decode method to instrument (tried {tried}); "
        "use profile method `api` (/start_profile)"
    )
