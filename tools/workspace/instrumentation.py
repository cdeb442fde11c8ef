"""torch.profiler instrumentation of a target's `ModelRunner.forward_decode`, inserted and removed exactly.

The patch adds a self-contained helper block above the class and one decorator line above the
method; every added line ends with `# perfloop-instrumentation`. The helper is dormant unless
PERFLOOP_PROFILE_DIR is set when the module is imported. Then a `request.json`
(`{"id", "warmup_steps", "active_steps"}`, written atomically: temp file + rename) dropped in that
directory is claimed by rank 0 (renamed to `request.<id>.claimed`) and starts one profiling run,
which writes `<id>/trace.json.gz`, `<id>/summary.txt`, then `<id>/done.json`, each atomically.
Profiling errors never break decode: they go to `<id>/error.txt` (`error.txt` when the request
could not be read).

Removal reverses exactly our hunks with `git apply -R` on the working tree. User edits elsewhere
in the file, made before or after instrumentation, are kept: the result must equal the current file
minus our marked lines (which is the pre-instrumentation file when nobody edited it meanwhile).
"""

from __future__ import annotations

import ast
import re

from state.workspace import InstrumentationRecord
from tools.errors import InstrumentationError, PatchError
from tools.workspace.commands import sha256_hex
from tools.workspace.git import GitWorkspace

MARKER_ID = "perfloop-instrumentation"
CONTEXT_LINES = 3
NO_EOL = "\n\\ No newline at end of file\n"
REMOVAL_MIN_CONTEXT = 0  # our marked lines locate the hunks; context may have been edited since
RUNTIME = """\
def _perfloop_profiled(fn):
    # Profile fn with torch.profiler when $PERFLOOP_PROFILE_DIR/request.json appears.
    import os
    root = os.environ.get("PERFLOOP_PROFILE_DIR")
    if not root:
        return fn
    import json
    import torch
    import torch.distributed
    import torch.profiler
    run = {}

    def write(path, text):
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)

    def is_rank0():
        dist = torch.distributed
        return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0

    def finish(prof):
        out = run["out"]
        trace, summary = os.path.join(out, "trace.json.gz"), os.path.join(out, "summary.txt")
        prof.export_chrome_trace(os.path.join(out, "tmp.trace.json.gz"))
        os.replace(os.path.join(out, "tmp.trace.json.gz"), trace)
        averages = prof.key_averages(group_by_input_shape=True)
        first = averages[0] if len(averages) else None
        key = "self_cpu_time_total"
        if run["device"] == "cuda":
            key = "self_device_time_total" if hasattr(first, "self_device_time_total") else "self_cuda_time_total"
        write(summary, averages.table(sort_by=key, row_limit=40))
        done = {"id": run["id"], "steps": run["active"], "device": run["device"], "trace": trace, "summary": summary}
        write(os.path.join(out, "done.json"), json.dumps(done))

    def begin():
        request = os.path.join(root, "request.json")
        if not os.path.exists(request) or not is_rank0():
            return
        claiming = "%s.%d.claiming" % (request, os.getpid())
        os.rename(request, claiming)
        with open(claiming) as f:
            spec = json.load(f)
        run_id, warmup, active = str(spec["id"]), int(spec["warmup_steps"]), int(spec["active_steps"])
        if not run_id.replace("-", "").replace("_", "").replace(".", "").isalnum() or active < 1:
            raise ValueError("bad request %r: id must be [A-Za-z0-9._-], active_steps >= 1" % (spec,))
        os.rename(claiming, os.path.join(root, "request.%s.claimed" % run_id))
        run.update(id=run_id, out=os.path.join(root, run_id), total=warmup + active, active=active, steps=0)
        os.makedirs(run["out"], exist_ok=True)
        activities = [torch.profiler.ProfilerActivity.CPU]
        run["device"] = "cuda" if torch.cuda.is_available() else "cpu"
        if run["device"] == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        schedule = torch.profiler.schedule(wait=0, warmup=warmup, active=active, repeat=1)
        prof = torch.profiler.profile(activities=activities, record_shapes=True, with_flops=True,
                                      schedule=schedule, on_trace_ready=finish)
        prof.start()
        run["prof"] = prof

    def after():
        run["prof"].step()
        run["steps"] += 1
        if run["steps"] >= run["total"]:
            run["prof"].stop()
            run.clear()

    def fail(exc):
        prof, out = run.pop("prof", None), run.get("out", root)
        run.clear()
        write(os.path.join(out, "error.txt"), "%s: %s\\n" % (type(exc).__name__, exc))
        if prof is not None:
            prof.stop()

    def guarded(step):
        try:
            step()
        except Exception as exc:
            try:
                fail(exc)
            except Exception:
                pass

    def wrapper(*args, **kwargs):
        if "prof" not in run:
            guarded(begin)
        result = fn(*args, **kwargs)
        if "prof" in run:
            guarded(after)
        return result

    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, name, getattr(fn, name))
    wrapper.__wrapped__ = fn
    return wrapper

"""


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
    if fn is None:
        raise InstrumentationError(
            f"no top-level class {class_name} with a (non-async) method {method};"
            " pass the right class_name/method"
        )
    lines = _lines(source)
    newline = "\r\n" if lines[0].endswith("\r\n") else "\n"
    class_index = min([cls.lineno] + [d.lineno for d in cls.decorator_list]) - 1
    indent = lines[fn.lineno - 1][: fn.col_offset]
    return {
        class_index: [_mark(line, newline) for line in RUNTIME.split("\n")[:-1]],
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
