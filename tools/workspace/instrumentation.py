"""torch.profiler instrumentation of a target's `ModelRunner.forward_decode`, inserted and removed exactly.

The patch adds the hook program (the `_perfloop_profiled` function of profiler_hook.py, read as
text) above the class and one decorator line above the method; every added line ends with
`# perfloop-instrumentation`. The hook is dormant unless PERFLOOP_PROFILE_DIR is set when the module
is imported. Then a `request.json` (`{"id", "warmup_steps", "active_steps"}`, written atomically:
temp file + rename) dropped in that directory is claimed by rank 0 (renamed to
`request.<id>.claimed`) and starts one profiling run, which writes `<id>/trace.json.gz`,
`<id>/summary.txt`, then `<id>/done.json`, each atomically; in a torch.distributed group rank 0
passes the request on as `request.rank<R>.json` to each other rank R, which writes the same three
files under `<id>/rank<R>/` (one trace per rank). Profiling errors never break decode:
they go to `<id>/error.txt` (`error.txt` when the request could not be read).

Removal reverses exactly our hunks with `git apply -R` on the working tree. User edits elsewhere
in the file, made before or after instrumentation, are kept: the result must equal the current file
minus our marked lines (which is the pre-instrumentation file when nobody edited it meanwhile).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from state.engines.workspace import InstrumentationRecord
from tools.errors import InstrumentationError, PatchError
from tools.workspace.commands import sha256_hex
from tools.workspace.git import GitWorkspace

MARKER_ID = "perfloop-instrumentation"
CONTEXT_LINES = 3
NO_EOL = "\n\\ No newline at end of file\n"
REMOVAL_MIN_CONTEXT = 0  # our marked lines locate the hunks; context may have been edited since
HOOK_FILE = Path(__file__).with_name("profiler_hook.py")
"""The hook program; its `_perfloop_profiled` function is what gets inserted."""
HOOK_FUNCTION = "_perfloop_profiled"


@cache
def hook_text() -> str:
    """The lines inserted above the class: the hook function's source, then one blank line."""
    source = HOOK_FILE.read_text(encoding="utf-8")
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == HOOK_FUNCTION)
    return "".join(_lines(source)[fn.lineno - 1 : fn.end_lineno]) + "\n"


def _lines(text: str) -> list[str]:
    """Split like git does: on '\\n' only, keeping line endings (and a last line without one)."""
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)


def _mark(line: str, newline: str) -> str:
    """An inserted line, tagged with the marker comment."""
    return (f"{line}  # {MARKER_ID}" if line.strip() else f"# {MARKER_ID}") + newline


def _insertions(source: str, class_name: str, method: str) -> dict[int, list[str]]:
    """The lines to insert, keyed by the 0-based index of the source line they go before."""
    if MARKER_ID in source:
        raise InstrumentationError(
            f"the file is already instrumented (has '# {MARKER_ID}' lines); remove them first"
        )
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise InstrumentationError(f"cannot parse the file ({err}); fix its syntax first") from err
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    fn = cls and next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method), None)
    if cls is None or fn is None:
        raise InstrumentationError(
            f"no top-level class {class_name} with a (non-async) method {method};"
            " pass the right class_name/method"
        )
    lines = _lines(source)
    newline = "\r\n" if lines[0].endswith("\r\n") else "\n"
    class_index = min([cls.lineno] + [d.lineno for d in cls.decorator_list]) - 1
    indent = lines[fn.lineno - 1][: fn.col_offset]
    return {
        class_index: [_mark(line, newline) for line in hook_text().split("\n")[:-1]],
        fn.lineno - 1: [_mark(f"{indent}@_perfloop_profiled", newline)],
    }


def instrumented_source(source: str, class_name: str = "ModelRunner", method: str = "forward_decode") -> str:
    """The source with the helper block and decorator inserted (pure)."""
    inserts = _insertions(source, class_name, method)
    return "".join("".join(inserts.get(i, [])) + line for i, line in enumerate(_lines(source)))


def _hunks(old: list[str], inserts: dict[int, list[str]]) -> list[str]:
    """Unified-diff hunks inserting lines before old-line indexes, with CONTEXT_LINES of context."""
    groups: list[list[int]] = []
    for point in sorted(inserts):
        if groups and point - groups[-1][-1] <= 2 * CONTEXT_LINES:
            groups[-1].append(point)
        else:
            groups.append([point])
    hunks, shift = [], 0
    for group in groups:
        start, end = max(group[0] - CONTEXT_LINES, 0), min(group[-1] + CONTEXT_LINES, len(old))
        added = sum(len(inserts[p]) for p in group)
        body = [f"@@ -{start + 1},{end - start} +{start + 1 + shift},{end - start + added} @@\n"]
        for i in range(start, end):
            body += ["+" + line for line in inserts.get(i, [])] + [" " + old[i]]
        hunks.append("".join(line if line.endswith("\n") else line + NO_EOL for line in body))
        shift += added
    return hunks


def build_instrumentation_diff(
    source: str, relpath: str, class_name: str = "ModelRunner", method: str = "forward_decode"
) -> str:
    """A `git apply`-able unified diff that instruments `class_name.method` in `source` (pure)."""
    inserts = _insertions(source, class_name, method)
    header = f"diff --git a/{relpath} b/{relpath}\n--- a/{relpath}\n+++ b/{relpath}\n"
    return header + "".join(_hunks(_lines(source), inserts))


def _strip_markers(text: str) -> str:
    """The text without any line carrying our marker."""
    return "".join(line for line in _lines(text) if MARKER_ID not in line)


def _record(relpath: str, pre: str, post_sha256: str, class_name: str, method: str) -> InstrumentationRecord:
    """The record of instrumenting `pre` (the pre-instrumentation text)."""
    return InstrumentationRecord(
        relpath=relpath,
        pre_sha256=sha256_hex(pre.encode()),
        post_sha256=post_sha256,
        diff=build_instrumentation_diff(pre, relpath, class_name, method),
        marker_id=MARKER_ID,
    )


def instrument(
    ws: GitWorkspace, relpath: str, class_name: str = "ModelRunner", method: str = "forward_decode"
) -> InstrumentationRecord:
    """Insert the profiler into the working-tree file (index untouched). Idempotent."""
    if not (ws.root / relpath).is_file():
        raise InstrumentationError(
            f"[profile] model_runner_path = {relpath!r} is not a file of the checkout {ws.root}: name the "
            f'file that holds {class_name}.{method} there (or profile with [profile] method = "api")'
        )
    source = ws.read_file(relpath)
    if MARKER_ID in source:
        pre = _strip_markers(source)
        if instrumented_source(pre, class_name, method) != source:
            raise InstrumentationError(
                f"{relpath} has '# {MARKER_ID}' lines that are not exactly ours;"
                " delete them by hand, then retry"
            )
        return _record(relpath, pre, sha256_hex(source.encode()), class_name, method)
    record = _record(relpath, source, "", class_name, method)
    try:
        ws.apply_to_worktree(record.diff)
    except PatchError as err:
        raise InstrumentationError(f"cannot instrument {relpath}: {err}") from err
    post_sha256 = ws.file_sha256(relpath)
    if post_sha256 != sha256_hex(instrumented_source(source, class_name, method).encode()):
        ws.apply_to_worktree(record.diff, reverse=True)
        raise InstrumentationError(
            f"git applied the instrumentation of {relpath} differently than built;"
            " check the repo's apply/attributes config"
        )
    return record.model_copy(update={"post_sha256": post_sha256})


def is_instrumented(ws: GitWorkspace, record: InstrumentationRecord) -> bool:
    """Whether every line we inserted is in the working-tree file, unedited (their context may differ)."""
    return ws.worktree_has(record.diff, min_context=REMOVAL_MIN_CONTEXT)


def remove_instrumentation(ws: GitWorkspace, record: InstrumentationRecord) -> None:
    """Reverse exactly our hunks; keep every other byte, the user's later edits included. Idempotent.

    Our marked lines locate the hunks, so edits right next to them are fine. Raises
    InstrumentationError, leaving the file as it was, when a line we inserted was edited, or when
    the result would not be exactly the current file minus our marked lines.
    """
    current = ws.read_file(record.relpath)
    if MARKER_ID not in current:
        return
    if not is_instrumented(ws, record):
        raise InstrumentationError(
            f"cannot remove instrumentation from {record.relpath}: lines we inserted"
            f" were edited; delete the lines marked '# {MARKER_ID}' by hand"
        )
    ws.apply_to_worktree(record.diff, reverse=True, min_context=REMOVAL_MIN_CONTEXT)
    if ws.file_sha256(record.relpath) != sha256_hex(_strip_markers(current).encode()):
        ws.write_file(record.relpath, current.encode())
        raise InstrumentationError(
            f"removing instrumentation from {record.relpath} would change more than"
            f" our lines; file left as it was, delete the '# {MARKER_ID}' lines by hand"
        )
