"""The door tool that scores a port of the kv-cast patch: `sglang.equivalence`.

The patch passes the patch gate (tools/workspace/patch_check.py), is applied with `git apply` to a
scratch copy of the files it touches (the checkout is never changed), and the equivalence harness
(tools/sglang/equivalence.py) runs the backend's decode path unpatched and patched on CPU in a
confined child process (tools/sglang/sandbox.py: the probe's minimal environment, writes only in
its own folder, a time limit), never in perfloop's process: the patched code is a model's. Model code that raises
counts as a changed output. Through the door it is recorded, so a replay answers it from the
recording without running anything.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from state.engines.sglang import EquivalenceArgs, EquivalenceResult
from state.engines.workspace import PatchPolicy
from tools.door import tool
from tools.errors import PatchError, one_line
from tools.workspace.commands import APPLY
from tools.workspace.git import GitWorkspace
from tools.workspace.patch_check import scan_patch


@tool("sglang.equivalence")
def equivalence(args: EquivalenceArgs) -> EquivalenceResult:
    """Apply the patch to a scratch copy and run the harness on the backend before and after."""
    try:
        scan_patch(args.diff, PatchPolicy())  # the patch gate's rules (git's are the apply below)
    except PatchError as exc:
        return EquivalenceResult(applied=False, line=one_line(exc))
    try:
        with GitWorkspace(args.repo) as ws:
            files = ws.changed_files(args.diff)
    except PatchError as exc:
        return EquivalenceResult(applied=False, line=f"git refused the patch: {exc}")
    if args.backend not in files:
        return EquivalenceResult(applied=False, line=f"the patch does not change {args.backend}")
    with tempfile.TemporaryDirectory(prefix="perfloop-port-") as tmp:
        for rel in files:
            if (args.repo / rel).is_file():
                (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / rel).write_bytes((args.repo / rel).read_bytes())
        env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(Path(tmp).parent)}
        done = subprocess.run(
            ["git", *APPLY, "-"], cwd=tmp, input=args.diff, text=True, capture_output=True, env=env
        )
        if done.returncode != 0:
            why = done.stderr.strip().replace(tmp + "/", "") or "git apply failed"
            return EquivalenceResult(applied=False, line=f"git apply: {why}")
        after = (Path(tmp) / args.backend).read_text()
    from tools.sglang.sandbox import PortRaised, check  # the model's code: in a confined child

    try:
        identical, active, line = check((args.repo / args.backend).read_text(), after, args.backend)
    except Exception as exc:  # the patched code's own error (in the child), or the child's end
        said = str(exc) if isinstance(exc, PortRaised) else one_line(exc)
        return EquivalenceResult(
            applied=True, identical=False, active_rows_only=False, line=f"decode raised {said}"
        )
    return EquivalenceResult(applied=True, identical=identical, active_rows_only=active, line=line)
