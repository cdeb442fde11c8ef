"""Measuring with the real `python -m sglang.bench_serving` (sglang 0.5.9 and 0.5.23 from the package
registry, each in a venv of its own) against the real demo server, which speaks SGLang's native
`/generate` and OpenAI chat endpoints; the demo target ships a Hugging Face tokenizer equal to its
byte-level one for the benchmark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.decision.arms.measuring import beside_note
from state.config.target import BenchServingConfig, MeasureConfig
from state.door.calls import MeasureArgs
from state.measurement.workload import WorkloadConfig
from tests.e2e.conftest import git, last_json, make_repo, perfloop, write_target
from tests.procs import processes_in
from tests.sglang.conftest import bench_python
from tests.target.conftest import SMALL, TARGET, Server, free_port, launch, wait_healthy
from tools.bench import measure
from tools.engines.benchrun import BenchOutputError
from tools.errors import ConfigError

VERSION = "0.5.9"
CLIENT = f"sglang.bench_serving (sglang {VERSION})"


@pytest.fixture(scope="module")
def bench_py() -> Path:
    return bench_python(VERSION)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("bench-server") / "server.log"
    srv = Server(launch(TARGET, ["--port", str(port), *SMALL], log), port, log)
    wait_healthy(srv)
    yield srv
    srv.stop()


def bench_config(python: str, **overrides) -> BenchServingConfig:
    """bench_serving on the demo server with its shipped tokenizer (native `/generate` by default)."""
    return BenchServingConfig(
        **(
            {
                "use": "always",
                "python": python,
                "tokenizer": "{repo}/tokenizer",
                "input_len": 24,
                "env": {"HF_HUB_OFFLINE": "1"},
            }
            | overrides
        )
    )


def measure_args(server: Server, bench: BenchServingConfig, use: str = "always") -> MeasureArgs:
    cfg = MeasureConfig(prompts=["one", "two", "three"], max_tokens=6, repeats=2, bench_serving=bench)
    return MeasureArgs(
        base_url=server.url,
        model="mla-demo",
        config=cfg,
        label="baseline",
        tree_sha256="t",
        bench_serving=use,
        python=sys.executable,
        repo=str(TARGET),
    )


@pytest.mark.parametrize(
    "version, module, backend",
    [
        ("0.5.9", "sglang.bench_serving", "sglang"),
        ("0.5.23", "sglang.benchmark.serving", "sglang"),
        ("0.5.23", "sglang.benchmark.serving", "sglang-oai-chat"),
    ],
)
def test_real_bench_serving_measures_the_server(
    version: str, module: str, backend: str, server: Server
) -> None:
    """Two runs of three seeded prompts: every request streamed 6 tokens, greedy outputs repeat.
    `sglang` is SGLang's native /generate, `sglang-oai-chat` its OpenAI chat endpoint."""
    bench = bench_config(str(bench_python(version)), backend=backend)
    m = measure(measure_args(server, bench)).measurement
    assert m.client == f"{module} (sglang {version})"
    assert [r.prompt_index for r in m.requests] == [0, 1, 2, 0, 1, 2]
    assert all(r.completion_tokens == 6 and len(r.itl_ms) == 5 and r.ttft_ms > 0 for r in m.requests)
    assert m.outputs_stable and all(len(text) == 6 for text in m.outputs)  # byte tokens: one char each
    # TPOT over the streams that timed their tokens (one a loaded client read at once times none)
    timed = [r for r in m.requests if r.timed]
    assert m.tpot_ms.n == len(timed) >= 3 and m.tpot_ms.median > 0 and m.output_tok_per_s > 0


def test_real_bench_serving_measures_workload_windows(bench_py: Path, server: Server) -> None:
    """`[workload]` through sglang.bench_serving 0.5.9: one run per window, 4 requests at
    concurrency 4 (their latencies add up to more than the window's wall time: they overlapped),
    lengths drawn in the workload's ranges, the same greedy outputs in each window."""
    w = WorkloadConfig(
        concurrency=4, requests=4, prompts=4, input_len=[12, 24], output_len=[3, 6], warmup_windows=1
    )
    args = measure_args(server, bench_config(str(bench_py))).model_copy(update={"workload": w})
    m = measure(args).measurement
    assert m.client == CLIENT and [x.requests for x in m.windows] == [4, 4]
    for window in m.windows:
        reqs = [r for r in m.requests if r.window == window.index]
        assert [r.prompt_index for r in reqs] == [0, 1, 2, 3] and window.concurrency == 4
        assert all(3 <= r.completion_tokens <= 6 for r in reqs)
        assert window.output_tokens == sum(r.completion_tokens for r in reqs)
        assert sum(r.ttft_ms + sum(r.itl_ms) for r in reqs) > window.wall_s * 1000  # in flight together
    assert m.outputs_stable and len(m.outputs) == 4


def test_both_clients_measure_one_launch_at_two_levels(bench_py: Path, server: Server) -> None:
    """`use = "both"` under `concurrency = [4, 1]`: perfloop's client measures what the rule judges
    (a window at each level per repeat), then bench_serving 0.5.9 the same workload on the same
    server, recorded beside with its windows numbered alike; both notes name their levels."""
    w = WorkloadConfig(
        concurrency=[4, 1], requests=4, prompts=4, input_len=[12, 24], output_len=[3, 6], warmup_windows=0
    )
    args = measure_args(server, bench_config(str(bench_py), use="both"), use="both")
    m = measure(
        args.model_copy(update={"workload": w, "config": args.config.model_copy(update={"repeats": 1})})
    ).measurement
    assert m.client == "perfloop" and m.beside is not None and m.beside.client == CLIENT
    for one in (m, m.beside):
        assert [(x.index, x.concurrency, x.requests) for x in one.windows] == [(0, 4, 4), (1, 1, 4)]
        assert {r.window for r in one.requests} == {0, 1} and one.outputs_stable
    note = beside_note(m)
    assert note.startswith(f"; beside, {CLIENT}: at concurrency 4: ") and "; at concurrency 1: " in note


def test_auto_without_sglang_uses_perfloop_client(server: Server) -> None:
    """`auto` on a python without sglang (this test venv's) measures with perfloop's own client."""
    m = measure(measure_args(server, BenchServingConfig(), use="auto")).measurement
    # 3 prompts x 2 repeats, and up to 2 more each that a starved client read at once (untimed_again)
    assert m.client == "perfloop" and 6 <= len(m.requests) <= 12


def test_always_without_sglang_is_one_clear_line(server: Server) -> None:
    with pytest.raises(ConfigError) as err:
        measure(measure_args(server, BenchServingConfig(use="always")))
    assert str(err.value) == (
        f'measure.bench_serving.use = "always" but {sys.executable} has no sglang '
        "with bench_serving; install sglang there, or set measure.bench_serving.python"
    )


def test_failing_bench_serving_is_one_clear_line(bench_py: Path, server: Server) -> None:
    """A tokenizer path that does not exist: bench_serving exits non-zero, its last line is named."""
    bench = bench_config(str(bench_py), tokenizer="{repo}/no-such-tokenizer")
    with pytest.raises(BenchOutputError) as err:
        measure(measure_args(server, bench))
    message = str(err.value)
    assert message.startswith("sglang.bench_serving exited with status 1: ") and "\n" not in message
    kept = Path(message.rsplit("(its whole output: ", 1)[1].removesuffix(" on the host)"))
    assert "no-such-tokenizer" in kept.read_text() and "--backend sglang" in kept.read_text()
    kept.unlink()


def test_the_loop_measures_with_bench_serving(bench_py: Path, tmp_path: Path) -> None:
    """The whole demo loop with `measure.bench_serving.use = "always"`: the baseline and the
    candidate are measured by bench_serving, the patch is judged on those numbers and accepted."""
    repo = make_repo(tmp_path / "engine")
    target = write_target(tmp_path / "t.toml", repo)
    target.write_text(
        target.read_text()
        + f"""
[measure.bench_serving]
use = "always"
python = {json.dumps(str(bench_py))}
tokenizer = "{{repo}}/tokenizer"
input_len = 24
env = {{ HF_HUB_OFFLINE = "1" }}
"""
    )
    home = tmp_path / "home"
    proc = perfloop(home, "run", "--approve", "auto", str(target), "--json", "--max-iterations", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = last_json(proc)
    assert s["status"] == "done" and s["accepted"] == ["kv-cache-full-pool-cast"], s
    assert s["outputs_identical"] is True and s["speedup"] > 1
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    notes = [(t["node"], t["note"]) for t in shown["transitions"] if t["node"] in ("baseline", "measure")]
    assert [node for node, _ in notes] == ["baseline", "measure"]
    assert all(f"measured by {CLIENT}" in note for _, note in notes), notes  # then the workload, looks
    assert git(repo, "status", "--porcelain") == "" and processes_in(repo) == []


def test_shipped_tokenizer_is_the_servers(bench_py: Path) -> None:
    """transformers' AutoTokenizer on the demo's `tokenizer/` gives the server's byte ids, both ways."""
    sample = "KV cache: wörld ✓ \x01\x7f"
    script = (
        "import json, sys; from transformers import AutoTokenizer; "
        f"t = AutoTokenizer.from_pretrained({str(TARGET / 'tokenizer')!r}); ids = t.encode(sys.argv[1]); "
        "print(json.dumps([ids, t.decode(ids), t.vocab_size]))"
    )
    done = subprocess.run(
        [str(bench_py), "-W", "ignore", "-c", script, sample],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-1000:]
    ids, text, vocab = json.loads(done.stdout.strip().splitlines()[-1])
    assert ids == list(sample.encode("utf-8")) and text == sample and vocab == 256
