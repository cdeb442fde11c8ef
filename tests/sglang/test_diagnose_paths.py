"""`perfloop diagnose` tells a CUDA-graph decode trace from an eager one and names the SGLang patch
that covers the path it shows (playbooks/patches.py `covering`), or says that none does.

The traces are the demo's glm5 decode step as Kineto events (tests/unit/glm5_shaped.py): eager, each
kernel launched by an operator (`aten::copy_` on the [495552, 1, 576] pool); under CUDA graphs, one
`cudaGraphLaunch` per step replaying the kernels, with no operators or dims inside the replay.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from playbooks.engine import load_playbooks
from playbooks.patches import covering
from tests.unit.glm5_shaped import glm5_events

PLAYBOOK = next(b for b in load_playbooks() if b.id == "kv-cache-full-pool-cast")
runner = CliRunner()


def trace(folder: Path, graph: bool) -> Path:
    path = folder / f"glm5-cast-{'graph' if graph else 'eager'}.json.gz"
    with gzip.open(path, "wt") as out:
        json.dump({"traceEvents": glm5_events(cast=True, graph=graph)}, out)
    return path


def cast_finding(path: Path, *version: str) -> dict:
    args = ["diagnose", str(path), "--json", "--target-kind", "sglang"]
    done = runner.invoke(app, [*args, *(["--sglang-version", version[0]] if version else [])])
    assert done.exit_code == 0, done.output
    return next(f for f in json.loads(done.output)["findings"] if f["playbook"] == PLAYBOOK.id)


@pytest.mark.parametrize(
    ("graph", "version", "path", "patch"),
    [
        (True, "0.5.23", "graph-decode", "sglang@0.5.22+graphs"),
        (False, "0.5.23", "eager-decode", "sglang@0.5.22"),
        (True, "0.5.9", "graph-decode", None),
        (False, "0.5.9", "eager-decode", "sglang@0.5.8"),
    ],
)
def test_diagnose_names_the_decode_path_and_the_patch_covering_it(
    tmp_path, graph, version, path, patch
) -> None:
    found = cast_finding(trace(tmp_path, graph), version)
    assert (found["decode_path"], found["patch"]) == (path, patch)
    if patch is None:
        assert found["patch_note"] == (
            "no patch for sglang 0.5.9 covers graph-decode (sglang@0.5.8 covers eager-decode)"
        )
    else:
        assert found["patch_note"] == f"{patch} ({PLAYBOOK.patches[patch]}) covers {path} on sglang {version}"


def test_text_report_names_the_graph_path_and_patch_without_a_release(tmp_path) -> None:
    done = runner.invoke(app, ["diagnose", str(trace(tmp_path, graph=True))])
    assert done.exit_code == 0, done.output
    assert (
        "   graph-decode: sglang@0.5.22+graphs (patches/sglang-0.5.23-graphs.diff) covers graph-decode on "
        "sglang 0.5.22 and later (no release given)"
    ) in done.output


def test_covering_reads_the_playbooks_patch_paths() -> None:
    assert PLAYBOOK.patch_paths["sglang@0.5.22+graphs"] == ["eager-decode", "graph-decode", "extend"]
    assert covering(PLAYBOOK, "sglang", "extend", "0.5.22")[0] == "sglang@0.5.22+graphs"
    assert covering(PLAYBOOK, "sglang", "extend", "0.5.10")[0] is None
    assert covering(PLAYBOOK, "sglang", "graph-decode", "0.5.7") == (
        None,
        "no sglang patch for 0.5.7 (the oldest starts at 0.5.8)",
    )
    assert covering(PLAYBOOK, "mla_server", "graph-decode", None)[0] == "mla_server"  # unlisted: all paths
