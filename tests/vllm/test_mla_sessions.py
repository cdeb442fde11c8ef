"""Sessions 2 and 3 on the real vLLM engine: the seeds' bug class (PLANTED) and a fast wrong patch.

The target is the tiny DeepSeek-V2-style MLA model served by vLLM's real MLA decode path (`CPU_MLA`,
pinned: a CPU with AMX would pick AMX_MLA) from a clone of the vLLM source in which a PLANTED change
is committed, as a user's tree is found: decode casts the WHOLE KV cache to float32 on every layer
of every step (tests/vllm/mla_case.py; the case the seeds met in SGLang's FlashInfer MLA backend for
GLM-5). The cache is sized by `--num-gpu-blocks-override` (BLOCKS blocks of 16 tokens, 36 MB a
layer): the cast is most of a decode step, yet a launch is as cheap as any. The model has a seeded
random checkpoint instead of vLLM's dummy weights, whose outputs no attention change can move
(`weighted_mla`). Profiles are taken by the patch method: perfloop's hook in
`GPUModelRunner.execute_model`, inserted before the first launch and removed at the end.

One session, two candidates from a test-only playbooks folder (`--playbooks`, built-ins off):
- `cast-fix-first-block-only` (tried first): the gather-then-cast fix plus a wrong gather that
  reads only the first block of each request's context. Faster than the fix, and wrong: rejected
  on the output gate (exact policy: the fix changes no arithmetic) before any timing.
- `catalog-kv-cache-full-pool-cast`: the built-in playbook kv-cache-full-pool-cast copied byte for
  byte but its id, with its `vllm` patch: kept, outputs identical.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import last_json, perfloop
from tests.vllm.conftest import MODELS, TEMPLATE, VLLM_PYTHON
from tests.vllm.mla_case import BACKEND, PLANTED, PLAYBOOK, git, weighted_mla
from tools.vllm.checkout import clone
from tools.vllm.hook import HOOK_SITES
from tools.vllm.target import write_target

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(2400),
    pytest.mark.xdist_group("vllm"),
]  # one session, 3 launches

BLOCKS = 1024
RUNNER = "vllm/" + HOOK_SITES[0][0]
FIX = "catalog-kv-cache-full-pool-cast"
"""The built-in playbook kv-cache-full-pool-cast, copied unchanged but for its id: a test's
playbooks folder may not reuse a catalog id, and the catalog's other playbooks stay out."""
WRONG = (  # after the fix's gather width: every request attends to its first 16 positions only
    "        width = int((seq_lens.max().item() + block_size - 1) // block_size)\n",
    "        seq_lens = seq_lens.clamp(max=block_size)  # WRONG on purpose: first block only\n"
    "        width = int((seq_lens.max().item() + block_size - 1) // block_size)\n",
)


def variant(dest: Path, pid: str, confidence: float | None = None) -> Path:
    """A copy of the built-in playbook's folder under another id (ids are unique across folders),
    its confidence changed if given; every other byte as in the catalog."""
    folder = dest / pid
    shutil.copytree(PLAYBOOK.source_dir, folder)
    text = (folder / "playbook.toml").read_text()
    new = text.replace(f'id = "{PLAYBOOK.id}"', f'id = "{pid}"')
    if confidence is not None:
        new = new.replace(f"confidence = {PLAYBOOK.confidence}", f"confidence = {confidence}")
    assert new.count("\n") == text.count("\n") and f'id = "{pid}"' in new
    (folder / "playbook.toml").write_text(new)
    return folder


def books(dest: Path, repo: Path) -> Path:
    """The built-in playbook as it is (renamed FIX), and a wrong variant of its vllm patch (0.99)."""
    variant(dest, FIX)
    wrong = variant(dest, "cast-fix-first-block-only", 0.99)
    scratch = clone(repo, dest.parent / "scratch")
    git(scratch, "apply", str(Path(PLAYBOOK.source_dir) / PLAYBOOK.patches["vllm"]))
    fixed = (scratch / BACKEND).read_text()
    assert fixed.count(WRONG[0]) == 1, "the vllm patch changed: update WRONG"
    (scratch / BACKEND).write_text(fixed.replace(WRONG[0], WRONG[1]))
    (wrong / PLAYBOOK.patches["vllm"]).write_text(git(scratch, "diff"))
    return dest


def target(folder: Path, models: Path) -> Path:
    """The target TOML (tools/vllm/target.py's), with the planted commit in its clone."""
    flags = ("--enforce-eager", "--attention-backend", "CPU_MLA", "--num-gpu-blocks-override", str(BLOCKS))
    extra = (
        f'model_runner_path = "{RUNNER}"\nhook_class = "{HOOK_SITES[0][1]}"\n'
        f'hook_method = "{HOOK_SITES[0][2]}"\n'
        "[correctness]\nrandom_prompts = 1\nmax_prompt_chars = 300\nmax_tokens = 16\n"
        'concurrent = 0\nlong_prompts = 0\n[decide]\nlooks = 1\narms = "sequential"\nauto_aa_pairs = 0\n'
    )
    path = write_target(folder, model="tiny-mla", flags=flags, profile=False, extra_toml=extra, models=models)
    text = path.read_text()
    edits = {
        '"--load-format", "dummy"': '"--load-format", "safetensors"',  # the seeded checkpoint
        'method = "api"': 'method = "patch"',
    }
    for old, new in edits.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path.write_text(text)
    repo = folder / "vllm"
    git(repo, "apply", str(PLANTED))
    identity = ["-c", "user.name=perfloop-tests", "-c", "user.email=tests@localhost"]
    git(repo, *identity, "commit", "-q", "-am", "PLANTED (perfloop test case): full KV-cache cast")
    return path


def test_planted_full_cache_cast_is_found_fixed_and_kept_and_a_fast_wrong_gather_rejected(tmp_path):
    t0 = time.monotonic()
    models = tmp_path / "models"
    weighted_mla(MODELS, VLLM_PYTHON, models)
    toml = target(tmp_path / "t", models)
    repo = tmp_path / "t" / "vllm"
    assert (repo / ".git").is_dir() and (TEMPLATE / RUNNER).is_file()
    runner_bytes = (repo / RUNNER).read_bytes()
    folder = books(tmp_path / "books", repo)
    home = tmp_path / "home"
    proc = perfloop(
        home, "run", str(toml), "--json", "--playbooks", str(folder), "--no-builtin-playbooks",
        "--max-iterations", "1", timeout=2200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = last_json(proc)
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    notes = {t["node"]: t["note"] for t in shown["transitions"]}
    by = {d["playbook"]: d for d in shown["decisions"]}
    wall = time.monotonic() - t0

    # found from the trace: aten::copy_ on the whole cache, [blocks, 16, 576], on top
    assert f"[{BLOCKS}, 16, 576]" in notes["diagnose"] and "aten::copy_" in notes["diagnose"], notes[
        "diagnose"
    ]
    assert "cast-fix-first-block-only" in notes["diagnose"] and FIX in notes["diagnose"]
    assert s["profile_method"] == "patch"

    wrong = by["cast-fix-first-block-only"]
    assert wrong["verdict"] == "rejected" and wrong["judgement"] is None, wrong  # never timed
    assert wrong["reason"].startswith("outputs changed"), wrong["reason"]

    fix = by[FIX]
    assert fix["verdict"] == "accepted" and fix["reason"].endswith("outputs identical"), fix["reason"]
    assert s["accepted"] == [FIX] and s["rejected"] == ["cast-fix-first-block-only"], s
    assert s["outputs_identical"] is True and s["server_launches"] == 3, s

    # the kept commit is the playbook's vllm patch, alone; the instrumentation is gone byte for byte
    assert git(repo, "diff", "--name-only", "main..HEAD").split() == [BACKEND]
    assert git(repo, "diff", "main..HEAD").count("index_select(0, used)") == 1
    assert git(repo, "status", "--porcelain") == "" and (repo / RUNNER).read_bytes() == runner_bytes
    assert "perfloop-instrumentation" not in (repo / RUNNER).read_text()

    look = fix["judgement"]["looks"][-1]
    print(
        f"\nvLLM MLA planted cast (session 2+3): TPOT {s['tpot_ms_before']:.2f} -> "
        f"{s['tpot_ms_after']:.2f} ms, speedup {look['speedup']:.2f}x "
        f"(95% CI [{look['ci_low']:.2f}, {look['ci_high']:.2f}]), wrong gather rejected: "
        f"{wrong['reason'][:80]}; {s['server_launches']} launches, {wall:.0f} s wall"
    )
    print(json.dumps({"diagnose": notes["diagnose"][:300], "baseline": notes.get("baseline", "")[:300]}))
