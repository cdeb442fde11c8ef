"""The SGLang parts against real upstream source: wheels from the registry, real git, real tools.

Per release: the profiler hook goes in where that release decodes eagerly, compiles, and comes
out byte for byte; the playbook patch for that release applies, compiles, and forward_decode of
FlashInferMLAAttnBackend no longer casts the whole pool (checked on the AST). A release the patch
does not fit is refused with one line, and nothing changes.
"""

from __future__ import annotations

import ast
import json
import re

import pytest
from typer.testing import CliRunner

from agent.cli import app
from playbooks.engine import load_playbooks
from playbooks.patches import choose_patch
from tests.sglang.conftest import unpack
from tools.errors import PatchError
from tools.sglang.layout import hook_site, locate
from tools.sglang.patches import apply_sglang_patch
from tools.workspace.instrumentation import MARKER_ID, instrument, is_instrumented, remove_instrumentation

PLAYBOOK = next(b for b in load_playbooks() if b.id == "kv-cache-full-pool-cast")
HOOKS = {
    "0.5.9": ("python/sglang/srt/model_executor/model_runner.py", "ModelRunner", "forward_decode"),
    "0.5.23": ("python/sglang/srt/model_executor/runner/eager_runner.py", "EagerRunner", "_execute_decode"),
}
KEYS = {"0.5.9": "sglang@0.5.8", "0.5.23": "sglang@0.5.22"}
BACKEND = "srt/layers/attention/flashinfer_mla_backend.py"
"""The FlashInfer MLA attention backend the playbook patches, relative to the package."""
runner = CliRunner()


def method(source: str, class_name: str, name: str) -> ast.FunctionDef:
    """A method's AST node in a top-level class."""
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def casts_of_pool(fn: ast.FunctionDef) -> list[ast.Call]:
    """Calls `<...>.get_key_buffer(...).to(...)` in a function: the full-pool cast."""
    return [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "to"
        and isinstance(n.func.value, ast.Call)
        and isinstance(n.func.value.func, ast.Attribute)
        and n.func.value.func.attr == "get_key_buffer"
    ]


def calls(fn: ast.FunctionDef, attr: str) -> list[ast.Call]:
    """Calls of `<...>.attr(...)` in a function."""
    return [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
    ]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_instrumentation_goes_in_compiles_and_comes_out_byte_for_byte(version, tmp_path):
    ws = unpack(version, tmp_path)
    layout = locate(ws.root)
    assert (layout.kind, layout.version) == ("checkout", version)
    site = hook_site(ws.root, layout)
    assert (site.relpath, site.class_name, site.method) == HOOKS[version]
    before, snap = (ws.root / site.relpath).read_bytes(), ws.snapshot()
    record = instrument(ws, site.relpath, site.class_name, site.method)
    text = ws.read_file(site.relpath)
    compile(text, site.relpath, "exec")
    decorators = method(text, site.class_name, site.method).decorator_list
    assert next(ast.unparse(d) for d in decorators) == "_perfloop_profiled" and is_instrumented(ws, record)
    remove_instrumentation(ws, record)
    assert (ws.root / site.relpath).read_bytes() == before and ws.snapshot() == snap
    ws.close()


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_playbook_patch_applies_compiles_and_removes_the_full_pool_cast(version, tmp_path):
    ws = unpack(version, tmp_path)
    layout = locate(ws.root)
    rel = layout.rel(BACKEND)
    before = method(ws.read_file(rel), "FlashInferMLAAttnBackend", "forward_decode")
    assert len(casts_of_pool(before)) == 1  # the checker sees upstream's cast
    key, diff = choose_patch(PLAYBOOK, "sglang", layout)
    assert key == KEYS[version]
    assert apply_sglang_patch(ws, layout, diff, check_only=False) == [rel]
    text = ws.read_file(rel)
    compile(text, rel, "exec")
    after = method(text, "FlashInferMLAAttnBackend", "forward_decode")
    assert casts_of_pool(after) == []
    assert [ast.unparse(c.func) for c in calls(after, "_decode_kv_buffer")] == ["self._decode_kv_buffer"]
    helper = method(text, "FlashInferMLAAttnBackend", "_decode_kv_buffer")
    gathered = [
        c
        for c in calls(helper, "to")
        if isinstance(c.func, ast.Attribute)  # always (see calls): narrows the type
        and isinstance(c.func.value, ast.Call)
        and isinstance(c.func.value.func, ast.Attribute)
        and c.func.value.func.attr == "index_select"
    ]
    assert len(gathered) == 1  # pool.index_select(0, rows).to(dtype): cast after gather
    plan = method(text, "FlashInferMLAIndicesUpdaterDecode", "call_begin_forward")
    assert any(isinstance(n, ast.Return) for n in ast.walk(plan)) and calls(plan, "arange")
    ws.close()


def test_release_the_patch_does_not_fit_is_refused_and_nothing_changes(tmp_path):
    ws = unpack("0.5.14", tmp_path)
    layout = locate(ws.root)
    key, diff = choose_patch(PLAYBOOK, "sglang", layout)
    assert key == "sglang@0.5.8"
    files = {p: p.read_bytes() for p in ws.root.rglob("*.py")}
    snap = ws.snapshot()
    for check_only in (True, False):
        with pytest.raises(PatchError) as err:
            apply_sglang_patch(ws, layout, diff, check_only=check_only)
        assert re.fullmatch(
            r"playbook does not fit sglang 0\.5\.14: hunk \d+ failed at "
            r"python/sglang/srt/layers/attention/flashinfer_mla_backend\.py:\d+",
            str(err.value),
        )
    assert {p: p.read_bytes() for p in ws.root.rglob("*.py")} == files and ws.snapshot() == snap
    ws.close()


def test_installed_site_packages_tree_gets_the_rebased_patch(tmp_path):
    ws = unpack("0.5.9", tmp_path, package_dir="sglang")
    layout = locate(ws.root)
    assert (layout.kind, layout.package_dir) == ("site-packages", "sglang")
    _, diff = choose_patch(PLAYBOOK, "sglang", layout)
    assert apply_sglang_patch(ws, layout, diff, check_only=True) == [layout.rel(BACKEND)]
    ws.close()


def test_cli_instrument_remove_and_playbook_apply(tmp_path):
    ws = unpack("0.5.23", tmp_path)
    repo, site = ws.root, HOOKS["0.5.23"][0]
    original = (repo / site).read_bytes()
    done = runner.invoke(app, ["instrument", "--repo", str(repo), "--kind", "sglang"])
    assert done.exit_code == 0, done.output
    assert MARKER_ID in (repo / site).read_text() and "EagerRunner._execute_decode" in done.output
    saved = json.loads((repo / ".git" / "perfloop-instrumentation.json").read_text())
    assert list(saved) == [site] and ws.snapshot().dirty_sha256.keys() == {site}
    done = runner.invoke(app, ["instrument", "--repo", str(repo), "--kind", "sglang", "--remove"])
    assert done.exit_code == 0, done.output
    assert (repo / site).read_bytes() == original and not (
        repo / ".git" / "perfloop-instrumentation.json"
    ).exists()
    done = runner.invoke(app, ["instrument", "--repo", str(repo), "--kind", "sglang", "--remove"])
    assert done.exit_code == 2 and "no record of instrumenting" in done.output
    args = ["playbook", "apply", "kv-cache-full-pool-cast", "--repo", str(repo), "--kind", "sglang"]
    done = runner.invoke(app, [*args, "--check"])
    assert done.exit_code == 0 and "fits sglang 0.5.23 (sglang@0.5.22)" in done.output, done.output
    assert ws.snapshot().dirty_sha256 == {}
    done = runner.invoke(app, args)
    assert done.exit_code == 0 and "applied to sglang 0.5.23" in done.output, done.output
    assert list(ws.snapshot().dirty_sha256) == [
        "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
    ]
    done = runner.invoke(app, args)
    assert done.exit_code == 2 and "playbook does not fit sglang 0.5.23: hunk 1 failed at" in done.output
    ws.close()
