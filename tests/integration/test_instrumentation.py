"""Profiler instrumentation on real repositories: exact insert/remove, and a real torch.profiler run."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.errors import InstrumentationError
from tools.workspace.commands import sha256_hex
from tools.workspace.git import GitWorkspace
from tools.workspace.instrumentation import (
    MARKER_ID,
    build_instrumentation_diff,
    instrument,
    instrumented_source,
    is_instrumented,
    remove_instrumentation,
)

RUNNER = '''\
"""A tiny decode step: a matmul and an FP8 -> BF16 cast of a whole KV pool."""
import torch

POOL_ROWS = 4096


def helper():
    return 1


class ModelRunner:
    """Holds weights and an FP8 KV pool."""

    def __init__(self):
        self.weight = torch.randn(64, 64)
        self.kv_pool = torch.randn(POOL_ROWS, 1, 576).to(torch.float8_e4m3fn)

    def forward_decode(self, x):
        kv = self.kv_pool.to(torch.bfloat16)
        return x @ self.weight + kv[:1, 0, :64].float()

    def forward_extend(self, x):
        return x
'''
RELPATH = "srt/model_runner.py"


@pytest.fixture
def ws(tmp_path):
    """A workspace whose srt/model_runner.py is RUNNER."""
    (tmp_path / "src" / "srt").mkdir(parents=True)
    (tmp_path / "src" / RELPATH).write_text(RUNNER)
    with GitWorkspace.create_from_tree(tmp_path / "src", tmp_path / "repo") as workspace:
        yield workspace


def write(ws: GitWorkspace, text: str) -> None:
    """Replace the runner's working-tree content."""
    (ws.root / RELPATH).write_text(text)


def user_edits(ws: GitWorkspace) -> str:
    """Stage an edit above the class, leave one below the method unstaged; return the file text."""
    staged = RUNNER.replace("POOL_ROWS = 4096", "POOL_ROWS = 8192")
    write(ws, staged)
    ws.repo.git.add(RELPATH)
    text = staged.replace("        return x\n", "        return x + 0  # user\n")
    write(ws, text)
    return text


def test_diff_marks_every_added_line_and_applies_with_git(ws):
    diff = build_instrumentation_diff(RUNNER, RELPATH)
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added and all(line.endswith(f"# {MARKER_ID}") for line in added)
    assert f"+    @_perfloop_profiled  # {MARKER_ID}" in diff.splitlines()
    ws.apply_to_worktree(diff)
    assert ws.read_file(RELPATH) == instrumented_source(RUNNER)
    compile(ws.read_file(RELPATH), RELPATH, "exec")


@pytest.mark.parametrize(
    "source, message",
    [
        ("x = 1\n", "no top-level class ModelRunner"),
        ("class ModelRunner:\n    def forward_extend(self):\n        pass\n", "method forward_decode"),
        (instrumented_source(RUNNER), "already instrumented"),
        ("class ModelRunner(:\n", "cannot parse"),
    ],
)
def test_diff_refuses_what_it_cannot_instrument(source, message):
    with pytest.raises(InstrumentationError, match=message):
        build_instrumentation_diff(source, RELPATH)


def test_a_runner_path_not_in_the_checkout_is_one_line_naming_it(ws):
    """A target's `[profile] model_runner_path` that is not there (a typo, another engine's
    layout) was an internal FileNotFoundError; it is the tool's error naming the path and the fix."""
    with pytest.raises(
        InstrumentationError, match=r"model_runner_path = 'no/such/runner.py' is not a file"
    ) as e:
        instrument(ws, "no/such/runner.py")
    assert "ModelRunner.forward_decode" in str(e.value) and "\n" not in str(e.value)
    assert ws.repo.git.status("--porcelain") == ""  # nothing written


def test_crlf_and_no_final_newline_round_trip(ws):
    text = "import torch\r\n\r\nclass ModelRunner:\r\n    def forward_decode(self, x):\r\n        return x"
    (ws.root / RELPATH).write_bytes(text.encode())
    record = instrument(ws, RELPATH)
    assert "\r\n" in record.diff and "\\ No newline at end of file" in record.diff
    remove_instrumentation(ws, record)
    assert (ws.root / RELPATH).read_bytes() == text.encode()


def test_round_trip_restores_every_byte_with_user_changes_in_the_same_file(ws):
    text = user_edits(ws)
    before = ws.snapshot()
    record = instrument(ws, RELPATH)
    assert record.pre_sha256 == sha256_hex(text.encode()) and record.post_sha256 == ws.file_sha256(RELPATH)
    assert is_instrumented(ws, record)
    assert instrument(ws, RELPATH) == record
    assert ws.snapshot().staged_diff_sha256 == before.staged_diff_sha256
    remove_instrumentation(ws, record)
    assert ws.file_sha256(RELPATH) == record.pre_sha256
    assert ws.snapshot() == before
    remove_instrumentation(ws, record)
    assert ws.snapshot() == before and not is_instrumented(ws, record)


@pytest.mark.parametrize(
    "old, new",
    [
        ("POOL_ROWS = 4096", "POOL_ROWS = 1024"),  # far from our hunks
        ("    return 1\n", "    return 2\n"),  # context line right above our helper block
        (
            "def forward_decode(self, x):",
            "def forward_decode(self, x, y=0):",
        ),  # line right below our decorator
    ],
)
def test_user_edit_after_instrumentation_outside_our_lines_is_kept(ws, old, new):
    record = instrument(ws, RELPATH)
    write(ws, ws.read_file(RELPATH).replace(old, new, 1))
    remove_instrumentation(ws, record)
    assert ws.read_file(RELPATH) == RUNNER.replace(old, new, 1)
    assert ws.file_sha256(RELPATH) != record.pre_sha256


def test_duplicated_marker_line_is_refused_and_file_left_alone(ws):
    record = instrument(ws, RELPATH)
    text = ws.read_file(RELPATH).replace(
        "    def forward_extend", f"    @_perfloop_profiled  # {MARKER_ID}\n    def forward_extend"
    )
    write(ws, text)
    with pytest.raises(InstrumentationError, match="would change more than our lines"):
        remove_instrumentation(ws, record)
    assert ws.read_file(RELPATH) == text


@pytest.mark.parametrize(
    "old, new",
    [
        ("row_limit=40", "row_limit=50"),  # inside our helper block
        ("    @_perfloop_profiled", "    @_perfloop_profiled_v2"),  # our decorator line
    ],
)
def test_user_edit_inside_our_hunk_raises_and_leaves_file_alone(ws, old, new):
    record = instrument(ws, RELPATH)
    write(ws, ws.read_file(RELPATH).replace(old, new, 1))
    edited = (ws.root / RELPATH).read_bytes()
    with pytest.raises(InstrumentationError, match=f"cannot remove instrumentation from {RELPATH}") as err:
        remove_instrumentation(ws, record)
    assert "\n" not in str(err.value)
    assert (ws.root / RELPATH).read_bytes() == edited


def run_runner(ws: GitWorkspace, profile_dir: Path | None, script: str) -> str:
    """Import the runner from the repo in a fresh interpreter and run `script`; return stdout."""
    env = {k: v for k, v in os.environ.items() if k != "PERFLOOP_PROFILE_DIR"}
    if profile_dir:
        env["PERFLOOP_PROFILE_DIR"] = str(profile_dir)
    code = (
        f"import sys, torch\nsys.path.insert(0, {str(ws.root / 'srt')!r})\nimport model_runner as m\n{script}"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


DECODE = "runner = m.ModelRunner()\nfor _ in range(8):\n    out = runner.forward_decode(torch.randn(1, 64))\nprint(tuple(out.shape))\n"


def test_instrumented_runner_writes_trace_summary_and_done(ws, tmp_path):
    instrument(ws, RELPATH)
    profile_dir = tmp_path / "profiles"
    profile_dir.mkdir()
    (profile_dir / "request.json").write_text(json.dumps({"id": "r1", "warmup_steps": 2, "active_steps": 3}))
    assert run_runner(ws, profile_dir, DECODE).strip() == "(1, 64)"
    out = profile_dir / "r1"
    done = json.loads((out / "done.json").read_text())
    assert done == {
        "id": "r1",
        "steps": 3,
        "device": "cpu",
        "trace": str(out / "trace.json.gz"),
        "summary": str(out / "summary.txt"),
    }
    assert (profile_dir / "request.r1.claimed").exists() and not (profile_dir / "request.json").exists()
    with gzip.open(out / "trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    casts = [
        e
        for e in events
        if e.get("name") in ("aten::copy_", "aten::to", "aten::_to_copy")
        and "Input Dims" in e.get("args", {})
    ]
    assert any(e["args"]["Input Dims"][0] == [4096, 1, 576] for e in casts)
    assert sum(e.get("name") == f"ProfilerStep#{i}" for e in events for i in range(5)) == 3
    summary = (out / "summary.txt").read_text()
    assert "aten::copy_" in summary and "[[4096, 1, 576]" in summary and "Self CPU" in summary
    assert not list(out.glob("*.tmp")) and not (out / "error.txt").exists()


def test_bad_request_writes_error_and_decode_goes_on(ws, tmp_path):
    instrument(ws, RELPATH)
    (tmp_path / "request.json").write_text(json.dumps({"id": "r2", "warmup_steps": 1, "active_steps": 0}))
    assert run_runner(ws, tmp_path, DECODE).strip() == "(1, 64)"
    assert "ValueError" in (tmp_path / "error.txt").read_text()


def test_dormant_without_env_var_returns_the_original_function(ws):
    instrument(ws, RELPATH)
    script = "f = m.ModelRunner.forward_decode\nprint(f.__code__.co_name, hasattr(f, '__wrapped__'), m._perfloop_profiled(f) is f)\n"
    assert run_runner(ws, None, script).split() == ["forward_decode", "False", "True"]
    assert run_runner(ws, ws.root, script).split() == ["wrapper", "True", "False"]
