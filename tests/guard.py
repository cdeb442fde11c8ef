"""A scratch root that fails a test when perfloop writes outside $PERFLOOP_HOME and the target repo.

`Scratch` snapshots every entry under its root (files, folders, links; links not followed) when it is
made; `stray()` lists what appeared since outside the allowed roots: the home, repositories the
test registers with `allow`, and the inputs the test itself writes with `write`. The home sits a few
levels down, so a `../..` escape from it still lands inside the watched root.
"""

from __future__ import annotations

import os
from pathlib import Path


def entries(root: Path) -> set[Path]:
    """Every path under `root` (symlinks listed, not followed)."""
    found: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        found.update(base / n for n in (*dirnames, *filenames))
    return found


class Scratch:
    """A watched folder for one test: `home` is its $PERFLOOP_HOME."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "outer" / "inner" / "home"
        self.inputs = root / "inputs"
        self.inputs.mkdir(parents=True)
        self.home.mkdir(parents=True)
        self.allowed: list[Path] = [self.home]
        self._before = entries(root)

    def allow(self, *paths: Path) -> None:
        """Let perfloop (or the test) write under these too (e.g. the target repository)."""
        self.allowed += [Path(p) for p in paths]

    def write(self, name: str, data: str | bytes) -> Path:
        """An input file the test writes (allowed)."""
        path = self.inputs / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        self.allowed.append(path)
        return path

    def stray(self) -> list[str]:
        """What appeared under the root outside the allowed places since the snapshot."""
        new = entries(self.root) - self._before
        return sorted(
            str(p.relative_to(self.root))
            for p in new
            if not any(p == a or p.is_relative_to(a) or a.is_relative_to(p) for a in self.allowed)
        )
