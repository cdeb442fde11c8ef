"""The SGLang gather-then-cast patches, executed: the real upstream backend methods, unpatched and
patched, run on CPU and give identical decode outputs (the harness: tools/sglang/equivalence.py).

From the real wheel's `flashinfer_mla_backend.py`, before and after `git apply` of the playbook's
patch for that release, the harness runs the decode path exactly as written with the engine's
CUDA-only pieces replaced by plain-torch references. The unpatched run casts the whole FP8 pool and
plans on pool slot ids; the patched one must plan on 0..n-1 over the gathered rows and give
bit-identical outputs. A patch that gathered the wrong rows, planned the wrong ids or cast the
wrong buffer would change the outputs.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from state.engines.sglang import EquivalenceArgs
from tests.sglang.conftest import unpack
from tools.sglang.equivalence import CASES, HEADS, RANK, case, decode_path, on_cpu, run_decode
from tools.sglang.porting import equivalence

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "playbooks" / "catalog" / "kv-cache-full-pool-cast" / "patches"
BACKEND = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"


@pytest.fixture(scope="module", params=["0.5.9", "0.5.23"])
def sources(request, tmp_path_factory) -> tuple[str, dict, dict]:
    """The release's backend, compiled as upstream ships it and as the playbook patch leaves it."""
    version = request.param
    ws = unpack(version, tmp_path_factory.mktemp(f"sglang-{version}"))
    repo = ws.root
    ws.close()
    before = (repo / BACKEND).read_text()
    subprocess.run(["git", "-C", str(repo), "apply", str(PATCHES / f"sglang-{version}.diff")], check=True)
    after = (repo / BACKEND).read_text()
    assert after != before
    return version, decode_path(before, f"upstream/{BACKEND}"), decode_path(after, f"patched/{BACKEND}")


@pytest.fixture(autouse=True)
def _no_graph_capture() -> Iterator[None]:
    with on_cpu():
        yield


@pytest.mark.parametrize("seq_lens", CASES)
def test_patched_decode_equals_upstream_and_reads_only_active_rows(sources, seq_lens) -> None:
    version, upstream, patched = sources
    pools, req_to_token, req_pool_indices, lens, qs = case(seq_lens)
    expected, up = run_decode(upstream, pools, req_to_token, req_pool_indices, lens, qs)
    got, pb = run_decode(patched, pools, req_to_token, req_pool_indices, lens, qs)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True)), version
    n = sum(seq_lens)
    assert up.decode_wrapper.rows_given == pools[0].shape[0]  # upstream: the whole pool, cast
    assert pb.decode_wrapper.rows_given == n  # patched: only the batch's rows, gathered then cast
    assert torch.equal(pb.decode_wrapper.ids, torch.arange(n, dtype=torch.int32))  # planned on 0..n-1
    assert torch.equal(pb.forward_metadata.gathered_kv_indices, up.decode_wrapper.ids)  # the real rows
    assert expected[0].shape == (len(seq_lens), HEADS * RANK)


def test_same_dtype_kv_keeps_the_upstream_path(sources) -> None:
    """A BF16 pool (nothing to cast): the patch plans on the pool's own ids, as upstream does."""
    _, upstream, patched = sources
    pools, req_to_token, req_pool_indices, lens, qs = case([5, 9])
    pools = [p.to(torch.bfloat16) for p in pools]
    expected, up = run_decode(upstream, pools, req_to_token, req_pool_indices, lens, qs)
    got, pb = run_decode(patched, pools, req_to_token, req_pool_indices, lens, qs)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert pb.forward_metadata.gathered_kv_indices is None
    assert torch.equal(pb.decode_wrapper.ids, up.decode_wrapper.ids)


def recorded_check(model: str) -> tuple[str, dict]:
    """The patch and the harness's recorded answer of the first `sglang.equivalence` call of a
    scripted model's `sglang-port` eval recording (benchmarks/eval_scripted.py)."""
    path = ROOT / "tests" / "data" / "eval" / model / "sglang-port.json.gz"
    calls = json.loads(gzip.decompress(path.read_bytes()))["tool_calls"]
    first = next(c for c in calls if c["name"] == "sglang.equivalence")
    return first["input"]["diff"], first["output"]


def test_the_evals_recorded_ports_score_the_same_when_the_harness_runs_again(tmp_path: Path) -> None:
    """The eval's sglang-port replays answer the harness from the recording; run for real on 0.5.9,
    it gives the recorded answers: the port is equivalent and reads only the batch's rows, the
    wrong port (the pool's first n rows) changes the outputs, and one that raises counts as changed."""
    ws = unpack("0.5.9", tmp_path)
    repo = ws.root
    ws.close()
    for model, identical in (("scripted-fix", True), ("scripted-wrong", False)):
        diff, recorded = recorded_check(model)
        result = equivalence(EquivalenceArgs(repo=repo, diff=diff, backend=BACKEND))
        assert result.model_dump() == recorded and (result.identical, result.active_rows_only) == (
            identical,
            True,
        )
    raising = diff.replace("pool[: rows.numel()]", "pool[: undefined_rows.numel()]")
    result = equivalence(EquivalenceArgs(repo=repo, diff=raising, backend=BACKEND))
    assert (result.applied, result.identical) == (True, False), result
    assert result.line == "decode raised NameError: name 'undefined_rows' is not defined"
    stale = equivalence(
        EquivalenceArgs(repo=repo, diff=(PATCHES / "sglang-0.5.23.diff").read_text(), backend=BACKEND)
    )
    assert (
        not stale.applied
        and stale.identical is None
        and stale.line.startswith("git apply: error: patch failed")
    )
    assert (
        subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True
        ).stdout
        == ""
    )
