"""Sessions 2 and 3 on the real vLLM engine, from session 2's documented command: docs/VLLM.md's
`### Session 2` commands (the README's `make vllm-demo-mla`, the same line), read from the files and
run verbatim in the repository's root with a fresh PERFLOOP_HOME.

The target (tools/vllm/cases.py `mla`) is the tiny DeepSeek-V2-style MLA model served by vLLM's real
MLA decode path (`CPU_MLA`, pinned: a CPU with AMX would pick AMX_MLA) in its own bfloat16 from a
clone of the vLLM source in which a PLANTED change is committed, as a user's tree is found: decode
casts the WHOLE KV cache to float32 on every layer of every step (the case the seeds met in SGLang's
FlashInfer MLA backend for GLM-5). The cache is sized by `--num-gpu-blocks-override` (1,024 blocks
of 16 tokens, 36 MB a layer). The model has a seeded random checkpoint instead of vLLM's dummy
weights, whose outputs no attention change can move. Profiles are taken by the patch method:
perfloop's hook in `GPUModelRunner.execute_model`, inserted before the first launch and removed at
the end. `--proposer playbook`: stored patches only, no search trial.

Session 3 rides in the same session: the test adds one playbook through the documented command's
`PERFLOOP_ARGS` (`--playbooks DIR`; the command line itself is the docs'): `cast-fix-first-block-only`
(confidence 0.99, tried first), the gather-then-cast fix plus a wrong gather that reads only the
first block of each request's context. Faster than the fix, and wrong: rejected on the output gate
(exact policy: the fix changes no arithmetic) before any timing; then the built-in
kv-cache-full-pool-cast's `vllm` patch is kept, outputs identical.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import last_json, perfloop
from tests.vllm.conftest import TEMPLATE
from tests.vllm.documented import ROOT, readme_vllm_commands, run, session_commands
from tests.vllm.mla_case import BACKEND, PLAYBOOK, git, planted_repo
from tools.vllm.cases import BLOCKS, RUNNER
from tools.vllm.checkout import clone

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(2400),
    pytest.mark.xdist_group("vllm"),
]  # one session, 3-7 launches

FIX = PLAYBOOK.id
WRONG_ID = "cast-fix-first-block-only"
WRONG = (  # after the fix's gather width: every request attends to its first 16 positions only
    "        width = int((seq_lens.max().item() + block_size - 1) // block_size)\n",
    "        seq_lens = seq_lens.clamp(max=block_size)  # WRONG on purpose: first block only\n"
    "        width = int((seq_lens.max().item() + block_size - 1) // block_size)\n",
)
USER_PATH = {"PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"}


def books(dest: Path) -> Path:
    """A playbooks folder with one playbook: the built-in fix under another id, confidence 0.99,
    its `vllm` patch made wrong (the gather reads each request's first block only)."""
    folder = dest / WRONG_ID
    shutil.copytree(PLAYBOOK.source_dir, folder)
    text = (folder / "playbook.toml").read_text()
    new = text.replace(f'id = "{PLAYBOOK.id}"', f'id = "{WRONG_ID}"')
    new = new.replace(f"confidence = {PLAYBOOK.confidence}", "confidence = 0.99")
    assert new.count("\n") == text.count("\n") and f'id = "{WRONG_ID}"' in new and "0.99" in new
    (folder / "playbook.toml").write_text(new)
    scratch = planted_repo(dest.parent / "scratch")
    git(scratch, "apply", str(Path(PLAYBOOK.source_dir) / PLAYBOOK.patches["vllm"]))
    fixed = (scratch / BACKEND).read_text()
    assert fixed.count(WRONG[0]) == 1, "the vllm patch changed: update WRONG"
    (scratch / BACKEND).write_text(fixed.replace(WRONG[0], WRONG[1]))
    (folder / PLAYBOOK.patches["vllm"]).write_text(git(scratch, "diff"))
    return dest


def test_the_documented_planted_case_is_found_fixed_and_kept_and_a_fast_wrong_gather_rejected(tmp_path):
    t0 = time.monotonic()
    lines = session_commands(2)
    assert lines[0] in readme_vllm_commands(), (lines, readme_vllm_commands())  # the README's step
    runner = RUNNER[0]
    runner_bytes = (clone(TEMPLATE, tmp_path / "pristine") / runner).read_bytes()
    folder = books(tmp_path / "books")
    home = tmp_path / "home"
    printed = run(lines, home, 2200, {**USER_PATH, "PERFLOOP_ARGS": f"--playbooks {folder}"})
    wall = time.monotonic() - t0
    shown = last_json(perfloop(home, "show", "last", "--json"))
    s = shown["session"]["summary"]
    repo = home / "vllm-demo" / "mla" / "vllm"
    notes = {t["node"]: t["note"] for t in shown["transitions"]}
    by = {d["playbook"]: d for d in shown["decisions"]}

    # served in the model's bfloat16: no `--dtype float32` (under it the planted cast costs nothing)
    assert "--dtype" not in s["launch_argv"], s["launch_argv"]
    # found from the trace: aten::copy_ on the whole cache, [blocks, 16, 576], on top
    assert f"[{BLOCKS}, 16, 576]" in notes["diagnose"] and "aten::copy_" in notes["diagnose"], notes[
        "diagnose"
    ]
    assert WRONG_ID in notes["diagnose"] and FIX in notes["diagnose"]
    assert s["profile_method"] == "patch" and shown["search_trials"] == []  # playbooks only

    wrong = by[WRONG_ID]
    assert wrong["verdict"] == "rejected" and wrong["judgement"] is None, wrong  # never timed
    assert wrong["reason"].startswith("outputs changed"), wrong["reason"]

    fix = by[FIX]
    assert fix["verdict"] == "accepted" and "outputs identical alone" in fix["reason"], fix["reason"]
    assert s["accepted"] == [FIX] and s["rejected"] == [WRONG_ID], s
    # the timing texts compared only where they were alone and their repeats agreed (else None:
    # the correctness set judged them, its texts alone exactly)
    assert s["outputs_identical"] in (True, None) and 3 <= s["server_launches"] <= 7, s

    # the kept commit is the playbook's vllm patch, alone; the instrumentation is gone byte for byte
    assert git(repo, "diff", "--name-only", f"main..{s['branch']}").split() == [BACKEND]
    assert git(repo, "diff", f"main..{s['branch']}").count("index_select(0, used)") == 1
    assert git(repo, "status", "--porcelain") == "" and (repo / runner).read_bytes() == runner_bytes
    assert "perfloop-instrumentation" not in (repo / runner).read_text()
    # the documented follow-up ran: `perfloop show last --diff` printed the kept patch
    assert "index_select(0, used)" in printed[-1], printed[-1][-2000:]

    look = fix["judgement"]["looks"][-1]
    print(
        f"\nvLLM MLA planted cast (session 2+3): TPOT {s['tpot_ms_before'] or 0:.2f} -> "
        f"{s['tpot_ms_after'] or 0:.2f} ms, speedup {look['speedup']:.2f}x "
        f"(95% CI [{look['ci_low']:.2f}, {look['ci_high']:.2f}]), wrong gather rejected: "
        f"{wrong['reason'][:80]}; {s['server_launches']} launches, {wall:.0f} s wall"
    )
    print(json.dumps({"diagnose": notes["diagnose"][:300], "baseline": notes.get("baseline", "")[:300]}))
