"""`[decide] arms = "auto"`: the fit measured on a real process, the choice and its line, and which
arms a session then measures with."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agent.decision.arms.arms import arms_in_use, arms_line, choice_of, fits
from state.measurement.arms import ArmsChoice, MemoryFit, MemoryFitArgs
from state.measurement.decision import DecisionConfig
from tools.hosts.info import memory_fit

GIB = 1 << 30


def test_a_process_groups_resident_memory_is_measured() -> None:
    """A real process group holding 300 MB: its RSS is counted (the CPU path: no GPU memory of it
    on any GPU nvidia-smi lists), against the host's MemAvailable."""
    hold = "import time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); print(1, flush=True); time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-c", hold], stdout=subprocess.PIPE, start_new_session=True, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "1"
        fit = memory_fit(MemoryFitArgs(pgid=os.getpgid(proc.pid)))
    finally:
        proc.kill()
        proc.wait()
    assert fit.device == "cpu" and fit.where == "host memory"
    assert 300 << 20 <= fit.server_bytes < 600 << 20
    assert fit.free_bytes > 0


def test_the_target_file_decides_before_any_measurement() -> None:
    yes = choice_of(DecisionConfig(two_servers_fit=True), None)
    no = choice_of(DecisionConfig(two_servers_fit=False), None)
    assert (yes.arms, no.arms) == ("interleaved", "alternating") and yes.fit is None
    assert (
        arms_line(no)
        == "arms auto -> alternating (the target says two servers do not fit ([decide] two_servers_fit))"
    )


@pytest.mark.parametrize(
    ("free_gib", "server_gib", "arms"),
    [(40.0, 37.0, "alternating"), (100.0, 37.0, "interleaved"), (44.5, 37.0, "interleaved")],
)
def test_a_measured_fit_needs_the_servers_use_times_the_margin(
    free_gib: float, server_gib: float, arms: str
) -> None:
    """A glm5-preset server (37 GB) beside 40 GB free does not fit with the 1.2 margin; 44.5 does."""
    fit = MemoryFit(
        device="gpu", server_bytes=int(server_gib * GIB), free_bytes=int(free_gib * GIB), where="GPU 0"
    )
    choice = choice_of(DecisionConfig(), fit)
    assert choice.arms == arms and choice.fit == fit and fits(fit, 1.2) == (arms == "interleaved")
    assert f"GPU 0 has {free_gib:.1f} GiB free" in choice.why and "37.00 GiB" in choice.why


def test_the_resolved_choice_is_what_the_session_measures_with(tmp_path) -> None:
    from state.config.options import LoopOptions
    from state.config.target import TargetConfig
    from state.sessions.loop import LoopState

    target = TargetConfig.model_validate(
        {
            "name": "t",
            "kind": "mla_server",
            "repo": str(tmp_path),
            "model": "m",
            "launch": {"argv": ["x"]},
            "measure": {"prompts": ["a"]},
        }
    )
    state = LoopState(
        session_id="s", target=target, options=LoopOptions(session_dir=tmp_path, python="python")
    )
    assert target.decide.arms == "auto" and arms_in_use(state) == "sequential"  # nothing resolved yet
    chosen = state.model_copy(update={"arms": ArmsChoice(arms="alternating", why="w")})
    assert arms_in_use(chosen) == "alternating"
    pinned = target.model_copy(update={"decide": DecisionConfig(arms="interleaved")})
    assert arms_in_use(state.model_copy(update={"target": pinned})) == "interleaved"


def test_gpu_memory_is_read_per_gpu_the_servers_processes_use(tmp_path, monkeypatch) -> None:
    """nvidia-smi's CSV (answered by a script standing in for the binary, with a real process
    group's pid): the server's use is summed per GPU over its processes, other processes' are not
    counted, and the tightest GPU is the one reported."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        pid = proc.pid
        smi = tmp_path / "nvidia-smi"
        smi.write_text(
            "#!/bin/sh\n"
            'case "$1" in\n'
            "  --query-gpu=*) printf 'GPU-a, 0, 100000, 40000\\nGPU-b, 1, 30000, 41000\\n' ;;\n"
            f"  *) printf '{pid}, GPU-a, 37000\\n{pid}, GPU-b, 37000\\n999999, GPU-b, 4000\\n' ;;\n"
            "esac\n"
        )
        smi.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
        fit = memory_fit(MemoryFitArgs(pgid=os.getpgid(pid)))
    finally:
        proc.kill()
        proc.wait()
    assert (fit.device, fit.where, fit.note) == ("gpu", "GPU 1", "")
    assert (fit.server_bytes, fit.free_bytes) == (37000 << 20, 30000 << 20)
    assert choice_of(DecisionConfig(), fit).arms == "alternating"


def test_gpu_memory_of_hidden_processes_counts_as_the_servers(tmp_path, monkeypatch) -> None:
    """A container that hides host pids: nvidia-smi lists no process, yet GPU 0 holds 37 GB; that
    use counts as the server's (conservative), and the line says why."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  --query-gpu=*) printf 'GPU-a, 0, 100000, 37000\\nGPU-b, 1, 137000, 0\\n' ;;\n"
        "  *) ;;\n"
        "esac\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    fit = memory_fit(MemoryFitArgs(pgid=os.getpgid(0)))
    assert (fit.device, fit.where, fit.server_bytes) == ("gpu", "GPU 0", 37000 << 20)
    choice = choice_of(DecisionConfig(), fit)
    assert choice.arms == "interleaved" and choice.why.endswith("; server processes not visible")


def test_where_two_servers_do_not_fit_a_reference_host_gives_cross_host_arms() -> None:
    cfg = DecisionConfig(two_servers_fit=False, reference_host="x")
    assert arms_line(choice_of(cfg, None)) == (
        "arms auto -> cross-host (the target says two servers do not fit ([decide] two_servers_fit); "
        "the reference on host x ([decide] reference_host))"
    )
    assert choice_of(cfg.model_copy(update={"two_servers_fit": True}), None).arms == "interleaved"
    tight = MemoryFit(device="gpu", server_bytes=37 * GIB, free_bytes=40 * GIB, where="GPU 0")
    measured = choice_of(DecisionConfig(reference_host="x"), tight)
    assert measured.arms == "cross-host" and measured.why.endswith(
        "the reference on host x ([decide] reference_host)"
    )


@pytest.mark.parametrize(
    ("decide", "hosts", "error"),
    [
        (
            'arms = "cross-host"',
            [],
            'arms = "cross-host" needs reference_host = "NAME" and a [[hosts]] entry',
        ),
        (
            'arms = "cross-host"',
            ["a", "b"],
            'arms = "cross-host" needs reference_host = "NAME" (one of: a, b)',
        ),
        ('reference_host = "c"', ["a"], "[decide] reference_host = 'c' is not a [[hosts]] name (a)"),
        (
            'arms = "cross-host"\nreference_host = "c"',
            [],
            "reference_host = 'c' is not a [[hosts]] name (none listed)",
        ),
        (
            'arms = "cross-host"\nreference_host = "a"',
            ["a"],
            "is the target's own checkout: give that [[hosts]]",
        ),
    ],
)
def test_a_reference_host_must_be_one_of_the_hosts(
    tmp_path, decide: str, hosts: list[str], error: str
) -> None:
    """One line naming what to fix, from the real target loader."""
    from agent.cli.target import load_target
    from tools.errors import ConfigError

    same = "own checkout" in error  # the host's checkout is the target's, or a clone beside it
    listed = "".join(
        f'\n[[hosts]]\nname = "{h}"\nrepo = "{tmp_path if same else tmp_path / h}"\n' for h in hosts
    )
    path = tmp_path / "t.toml"
    path.write_text(
        f'name = "t"\nrepo = "{tmp_path}"\n[launch]\nargv = ["x"]\n[measure]\nprompts = ["a"]\n'
        f"[decide]\n{decide}\n{listed}"
    )
    with pytest.raises(ConfigError) as err:
        load_target(path)
    assert error in str(err.value) and len(str(err.value).splitlines()) == 1, str(err.value)
    ok = path.read_text().replace(decide, 'arms = "cross-host"\nreference_host = "a"')
    if hosts == ["a"] and not same:
        path.write_text(ok)
        assert load_target(path).decide.reference_host == "a"
