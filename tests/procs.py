"""Finding processes a test may have leaked, from /proc."""

from __future__ import annotations

import os
from pathlib import Path


def processes_in(path: Path) -> list[int]:
    """Live (non-zombie) processes whose working directory is `path` or inside it."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cwd = Path(os.readlink(entry / "cwd"))
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and (cwd == path or path in cwd.parents):
                found.append(int(entry.name))
    return found
