"""Fixes by launch options: the argv edits, the SGLang refusal, the playbook format (pure)."""

import pytest
from pydantic import ValidationError

from agent.decision.rules.legacy import judge
from playbooks.engine import load_playbooks
from playbooks.launch import change_conflict, describe, edited_argv, with_flag, without_flag
from playbooks.schema import LaunchEdit, Playbook
from state.measurement.measure import Measurement, RequestRecord
from tools.client.stats import summarize

BOOKS = {b.id: b for b in load_playbooks()}
GRAPHS = BOOKS["launch-bound-decode"]
EAGER_DEMO = ["bash", "launch.sh", "--port", "{port}", "--disable-cuda-graph", "--cuda-graph-max-bs", "2"]


def test_demo_launch_fix_drops_eager_and_raises_the_graph_batch() -> None:
    after = edited_argv(EAGER_DEMO, GRAPHS.launch["mla_server"])
    assert after == ["bash", "launch.sh", "--port", "{port}", "--cuda-graph-max-bs", "8"]
    assert describe(EAGER_DEMO, after) == "drop --disable-cuda-graph, --cuda-graph-max-bs 2 -> 8"
    assert edited_argv(after, GRAPHS.launch["mla_server"]) == after  # nothing left to change
    assert edited_argv(["x", "--cuda-graph-max-bs=16"], GRAPHS.launch["mla_server"]) == [
        "x",
        "--cuda-graph-max-bs=16",
    ]
    assert edited_argv(["x", "--cuda-graph-max-bs=4"], GRAPHS.launch["mla_server"]) == [
        "x",
        "--cuda-graph-max-bs",
        "8",
    ]
    assert change_conflict("mla_server", EAGER_DEMO, after, BOOKS.values()) is None  # its patch covers graphs


def test_sglang_graphs_refused_while_the_eager_only_cast_patch_matters() -> None:
    before = ["python", "-m", "sglang.launch_server", "--disable-cuda-graph", "--tp", "8"]
    after = edited_argv(before, GRAPHS.launch["sglang"])
    assert after == ["python", "-m", "sglang.launch_server", "--tp", "8"]
    why = change_conflict("sglang", before, after, [BOOKS["kv-cache-full-pool-cast"]])
    assert why is not None and why.startswith("it would stop kv-cache-full-pool-cast's patch from working")
    assert change_conflict("sglang", before, after, [BOOKS["host-sync-in-decode"]]) is None


def test_a_kind_gets_a_patch_or_a_launch_change_not_both() -> None:
    base = GRAPHS.model_dump(exclude={"launch"})
    with pytest.raises(ValidationError, match="both a patch and a launch change"):
        Playbook.model_validate(
            {
                **base,
                "patches": {"mla_server": "p.diff"},
                "launch": {"mla_server": [{"flag": "--x", "action": "remove"}]},
            }
        )
    with pytest.raises(ValidationError):
        LaunchEdit(flag="disable", action="remove")


def _m(tpots: list[float], texts: tuple[str, str] = ("a", "b")) -> Measurement:
    records = [
        RequestRecord(prompt_index=i % 2, ttft_ms=1.0, itl_ms=[t], text=texts[i % 2], completion_tokens=2)
        for i, t in enumerate(tpots)
    ]
    return summarize("x", "t", records, 2, 1.0)


def test_an_enabling_fix_is_kept_within_noise_but_not_when_worse_or_changed() -> None:
    ref = _m([86, 80, 92, 84])
    same = _m([85, 90, 81, 88])
    ok, reason, _ = judge(ref, same, "predicted 1.00x alone, 4.60x with kv-cache-full-pool-cast")
    assert ok and "kept as an enabling step" in reason
    assert not judge(ref, same)[0]  # without a pairing: within the noise, rolled back
    assert not judge(ref, _m([120, 125, 130, 128]), "x")[0]  # worse beyond the noise
    assert not judge(ref, _m([85, 90, 81, 88], ("a", "c")), "x")[0]  # outputs changed


def test_the_loop_stops_near_the_stated_floor() -> None:
    from agent.steps.measure import near_floor

    assert near_floor(17.4, None, 2.0) is None
    assert near_floor(17.4, 3.2, 2.0) is None  # 5.4x the floor: go on
    assert near_floor(6.0, 3.2, 2.0) == "TPOT 6.0 ms is within 2x of the floor 3.2 ms (1.9x)"
    within = near_floor(17.4, 3.2, 6.0)
    assert within is not None and within.startswith("TPOT 17.4 ms is within 6x")


def test_one_flag_editor_handles_both_spellings_of_a_value() -> None:
    assert with_flag(["a", "--device=cpu", "b"], "--device", "cuda") == ["a", "--device", "cuda", "b"]
    assert with_flag(["a", "--device", "cpu", "b"], "--device", "cuda") == ["a", "--device", "cuda", "b"]
    assert with_flag(["a", "--bare", "--x"], "--bare", "1") == ["a", "--bare", "1", "--x"]
    assert without_flag(["a", "--threads=1", "b"], "--threads") == ["a", "b"]
    assert without_flag(["a", "--threads", "1", "b"], "--threads") == ["a", "b"]
    assert without_flag(["a", "--bare", "--x"], "--bare") == ["a", "--x"]
