"""Cross-host arms' reference host must be of the session host's kind: `host.kind` reads the GPUs
a server would see (nvidia-smi, answered by a script standing in for the binary, picked by
`CUDA_VISIBLE_DEVICES`) and the CPU; `auto` falls back to alternating arms where the kinds differ,
and a target that names cross-host arms is refused in one line before anything is measured."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agent.decision.arms.arms import choose_arms, same_kind
from state.config.target import TrialHost
from state.measurement.arms import HostKind, HostKindArgs
from tests.unit.aa_door import ScriptedDoor, handle, runtime_of, session
from tools.door import Door
from tools.errors import ToolError
from tools.hosts.info import kind

H200, A100 = "NVIDIA H200", "NVIDIA A100-SXM4-80GB"


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three GPUs: two H200s (0, 1) and an A100 (2)."""
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\nprintf '0, GPU-aa, {H200}\\n1, GPU-bb, {H200}\\n2, GPU-cc, {A100}\\n'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.usefixtures("smi")
def test_the_gpus_a_server_would_see_by_index_or_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kind(HostKindArgs()).gpus == [H200, H200, A100]
    assert kind(HostKindArgs(cuda_visible_devices="2")).gpus == [A100]
    assert kind(HostKindArgs(cuda_visible_devices="GPU-bb, 0")).gpus == [H200, H200]
    assert kind(HostKindArgs(cuda_visible_devices="")).gpus == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # the host's own environment, where none is given
    k = kind(HostKindArgs())
    assert k.gpus == [H200] and k.cpu and k.describe() == f"1 x {H200}"


def test_without_a_gpu_the_cpu_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "nvidia-smi"
    broken.write_text("#!/bin/sh\nexit 9\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    here = kind(HostKindArgs())
    assert here.gpus == [] and here.cpu and here.describe().startswith("no GPU, CPU ")
    assert here.same_as(HostKind(cpu=here.cpu)) and not here.same_as(HostKind(cpu="another CPU"))
    assert not here.same_as(HostKind(gpus=[H200], cpu=here.cpu))
    two = HostKind(gpus=[A100, H200], cpu="a")
    assert two.same_as(HostKind(gpus=[H200, A100], cpu="b"))  # GPUs decide where there are any
    assert not two.same_as(HostKind(gpus=[H200, H200], cpu="a"))


class KindDoor(ScriptedDoor):
    """`host.kind` answered here and on the reference host's branch; the branches asked, kept."""

    def __init__(self, here: HostKind, there: HostKind) -> None:
        super().__init__({1: 10.0})
        self.kinds = {"here": here, "there": there}
        self.branches: list[tuple[str, Any]] = []
        self.where = "here"

    def branch(self, node: str, host: Any = None, task_id: str | None = None) -> Door:
        other = KindDoor(self.kinds["here"], self.kinds["there"])
        other.where, other.calls = "there", self.calls
        self.branches.append((node, host))
        return other

    def answer(self, name: str, args: Any, fn: Any) -> Any:
        if name == "host.kind":
            return self.kinds[self.where]
        return super().answer(name, args, fn)


def with_reference_host(tmp_path: Path, **decide: Any):
    state = session(tmp_path)
    host = TrialHost(name="x", repo=tmp_path / "x", env={"CUDA_VISIBLE_DEVICES": "1"})
    cfg = state.target.decide.model_copy(update={"reference_host": "x", **decide})
    target = state.target.model_copy(update={"hosts": [host], "decide": cfg})
    return state.model_copy(update={"target": target, "server": handle(1)})


def test_auto_takes_cross_host_only_with_a_reference_host_of_this_kind(tmp_path: Path) -> None:
    state = with_reference_host(tmp_path, arms="auto", two_servers_fit=False)
    door = KindDoor(HostKind(gpus=[H200], cpu="a"), HostKind(gpus=[H200], cpu="b"))
    choice = choose_arms(state, runtime_of(door))
    assert choice is not None and choice.arms == "cross-host" and choice.why.endswith(f"; both 1 x {H200}")
    assert door.branches == [("baseline@x", state.target.hosts[0].host)]
    asked = [a for n, a in door.calls if n == "host.kind"]
    assert [a.cuda_visible_devices for a in asked] == [None, "1"]  # the [[hosts]] entry's env there

    door = KindDoor(HostKind(gpus=[H200], cpu="a"), HostKind(gpus=[A100], cpu="a"))
    choice = choose_arms(state, runtime_of(door))
    assert choice is not None and choice.arms == "alternating"
    assert choice.why.endswith(f", but host x has 1 x {A100} and this one 1 x {H200}")


def test_named_cross_host_arms_refuse_a_reference_host_of_another_kind(tmp_path: Path) -> None:
    state = with_reference_host(tmp_path, arms="cross-host")
    door = KindDoor(HostKind(gpus=[H200, H200]), HostKind(gpus=[H200]))
    with pytest.raises(ToolError) as err:
        same_kind(state, runtime_of(door))
    assert str(err.value) == (
        f"[decide] reference_host = 'x' has 1 x {H200}, this host 2 x {H200}: name a host of the "
        'same kind, or set [decide] arms = "alternating"'
    )
    door = KindDoor(HostKind(cpu="c"), HostKind(cpu="c"))
    assert same_kind(state, runtime_of(door)) == "reference host x of this host's kind (no GPU, CPU c)"
