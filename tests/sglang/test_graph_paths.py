"""The graph-safe SGLang patch, executed: CUDA-graph decode and eager extend of the real backend,
unpatched and patched (sglang-0.5.23-graphs.diff), on paged KV, in the harness's confined child
(tools/sglang/sandbox.py) and directly (tools/sglang/graph_paths.py).

The newest release the package registry has is checked first: `pip index versions sglang` named
0.5.23 on 2026-12-06, so the newest and 0.5.23 are one release; a newer one fails that test until
the playbook has a patch checked on it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.sglang.conftest import unpack
from tools.sglang import sandbox
from tools.sglang.equivalence import on_cpu
from tools.sglang.graph_paths import CAPTURE_BS, WORLDS, check_paths, compiled, extend, graph_decode

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "playbooks" / "catalog" / "kv-cache-full-pool-cast" / "patches"
BACKEND = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
NEWEST = "0.5.23"
"""The newest sglang release in the package registry (`pip index versions sglang`, 2026-12-06)."""
RELEASES = sorted({NEWEST, "0.5.23"})


@pytest.fixture(scope="module", params=RELEASES)
def sources(request, tmp_path_factory) -> dict[str, str]:
    """The release's backend as shipped, with the eager patch and with the graph-safe one."""
    repo = unpack(request.param, tmp_path_factory.mktemp(f"sglang-{request.param}")).root
    found = {"upstream": (repo / BACKEND).read_text()}
    for name in ("sglang-0.5.23.diff", "sglang-0.5.23-graphs.diff"):
        subprocess.run(["git", "-C", str(repo), "apply", str(PATCHES / name)], check=True)
        found[name] = (repo / BACKEND).read_text()
        subprocess.run(["git", "-C", str(repo), "checkout", "--", "."], check=True)
    return found


@pytest.fixture(autouse=True)
def _no_graph_capture() -> Iterator[None]:
    with on_cpu():
        yield


def test_the_newest_release_in_the_registry_is_the_one_checked() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    newest = re.search(r"^sglang \(([^)]+)\)", done.stdout, re.M)
    assert newest and newest[1] == NEWEST, (done.returncode, done.stdout[:200], done.stderr[-300:])


def test_graph_patch_in_the_confined_child_equals_upstream_on_every_path(sources) -> None:
    """Eager decode, CUDA-graph decode (every captured bs, static shapes) and extend, page sizes
    1/16/64 with a shared tail page and reused pages: bit-identical, and only the batch's rows read."""
    identical, active, line = sandbox.check(
        sources["upstream"], sources["sglang-0.5.23-graphs.diff"], BACKEND
    )
    assert (identical, active) == (True, True), line
    assert line == (
        "eager decode outputs bit-identical to the unpatched backend's on 3 batch(es); the patched decode "
        "reads only the batch's KV rows; graph decode (page sizes 1/16/64): outputs bit-identical, gathers "
        "a fixed width per captured bs where it is below the pool (11 of 12 (page size, bs) replayed); one set "
        "of shapes and buffers over every replay; no host sync in the captured path; extend (page sizes "
        "1/16/64): outputs bit-identical, reads only the batch's KV rows"
    )


def test_eager_patch_keeps_the_full_pool_cast_under_graphs_and_in_extend(sources) -> None:
    """What the playbook says the eager patch covers: eager decode only."""
    identical, line = check_paths(sources["upstream"], sources["sglang-0.5.23.diff"], BACKEND)
    assert (
        identical and "graph decode (page sizes 1/16/64): outputs bit-identical, keeps the full-pool" in line
    )
    assert line.endswith("extend (page sizes 1/16/64): outputs bit-identical, casts the whole KV pool")


def test_graph_path_keeps_one_set_of_shapes_over_a_changing_batch(sources) -> None:
    """Batches of 3, 3, 3, 5, 4, 2 and 1 requests replay the graphs of bs 4, 4, 4, 8, 4, 2, 1: each
    hands the kernel the capture's shapes and buffers, a gathered width fixed per bs (bs x context, below
    the pool), never the batch's own token count; upstream hands it the whole pool every time."""
    page, pages, context = WORLDS[1]
    _, up = graph_decode(compiled(sources["upstream"], "u.py"), page, pages, context)
    _, run = graph_decode(compiled(sources["sglang-0.5.23-graphs.diff"], "p.py"), page, pages, context)
    assert run.static and up.static and run.ops.refused == [] and set(run.gathered) == set(CAPTURE_BS)
    assert run.gathered == {bs: bs * context for bs in CAPTURE_BS}
    assert up.gathered == dict.fromkeys(CAPTURE_BS, up.pool_rows)
    for bs in CAPTURE_BS:
        metadata, (seen, ids) = run.captured[bs]
        assert ids == ((bs * context,), metadata.gathered_kv_indices.data_ptr())
        assert {s[0] for s in seen} == {(bs * context, 1, 512)}  # ckv handed at capture, every layer


def test_harness_catches_stale_rows_host_syncs_and_wrong_extend_rows(sources) -> None:
    """Patches that are wrong in ways only these paths show: a graph that keeps last step's rows
    (a reused page then reads the old owner's), a gather cut to the rows in use (a host sync and a
    shape that follows the batch: outputs equal, the line says so), an extend gathering wrong rows."""
    graphs = sources["sglang-0.5.23-graphs.diff"]
    stale = graphs.replace("        ids[:n].copy_(kv_indices[:n])\n", "")
    rows = "        rows = self.forward_metadata.gathered_kv_indices\n"
    synced = graphs.replace(
        rows, rows + "        rows = rows if rows is None else rows[: int(rows.ne(0).sum()) + 8]\n"
    )
    flipped = graphs.replace("gathered_kv_indices = kv_indices\n                kv_indices = torch.arange(",
                             "gathered_kv_indices = kv_indices.flip(0)\n                kv_indices = torch.arange(")  # fmt: skip
    assert len({graphs, stale, synced, flipped}) == 4
    up = compiled(sources["upstream"], "u.py")
    want, _ = graph_decode(up, *WORLDS[0])
    got, _ = graph_decode(compiled(stale, "s.py"), *WORLDS[0])
    assert not all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    identical, line = check_paths(sources["upstream"], synced, BACKEND)
    assert (
        identical and "shapes change between replays; a host sync or data-shaped op in the captured" in line
    )
    want, _ = extend(up, *WORLDS[2])
    got, _ = extend(compiled(flipped, "f.py"), *WORLDS[2])
    assert not all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
