"""The launch-option search, its pure parts: knobs in a launch command, the TPE's next trial
rebuilt from the session's decisions, the first trial from the diagnosis, the budget."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest
from langgraph.types import Command

from agent.cli.target import ConfigError, load_target, with_proposer
from agent.context import LoopContext
from agent.proposer.tuning.budget import budget_left, worst_trial_s
from agent.proposer.tuning.knobs import config_of, describe_config, with_config
from agent.proposer.tuning.refusals import math_movers, refused_for_math
from agent.proposer.tuning.search import next_config, search_proposal, trial_lines
from agent.steps.propose import Goto, propose
from playbooks.predict import batching_gain_bound
from state.config.options import LoopOptions
from state.engines.vllm import DecodePhases
from state.measurement.numerics import NumericsVerdict
from state.measurement.workload import WorkloadConfig
from state.profiling.diagnosis import Diagnosis, Finding
from state.proposers.proposer import ProposerConfig
from state.proposers.search import Knob, KnobValue, SearchConfig
from state.sessions.loop import Decision, LoopState
from tests.recorders import MemoryRecorder
from tools.door.live import LiveDoor

SEARCH_TOML = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server_search.toml"
ARGV = ["bash", "launch.sh", "--port", "{port}", "--threads", "1"]


def knobs() -> list[Knob]:
    return [
        Knob(name="--max-total-tokens", type="choice", choices=[4096, 8192, 24576], first=4096),
        Knob(name="--max-running-requests", type="int", low=1, high=8),
        Knob(name="--disable-cuda-graph", type="bool"),
        Knob(name="MLA_CHUNK", env=True, type="float", low=0.5, high=2.0),
    ]


def test_knobs_round_trip_through_the_launch_command() -> None:
    config: dict[str, KnobValue] = {
        "--max-total-tokens": 8192,
        "--max-running-requests": 3,
        "--disable-cuda-graph": True,
        "MLA_CHUNK": 1.5,
    }
    argv = with_config(ARGV, knobs(), config)
    assert argv[:2] == ["env", "MLA_CHUNK=1.5"] and argv[2:8] == ARGV
    assert config_of(argv, knobs()) == config
    again = with_config(
        argv, knobs(), {"--max-total-tokens": 4096, "--disable-cuda-graph": False, "MLA_CHUNK": 0.5}
    )
    assert again.count("--max-total-tokens") == 1 and "--disable-cuda-graph" not in again
    assert again[:2] == ["env", "MLA_CHUNK=0.5"] and again.count("env") == 1
    assert describe_config(config_of(again, knobs()), knobs()).startswith("--max-total-tokens 4096")


def state(
    tmp_path: Path, decisions: Sequence[Decision] = (), findings: tuple[str, ...] = (), **search
) -> LoopState:
    target = load_target(SEARCH_TOML).model_copy(
        update={
            "search": SearchConfig(knobs=knobs(), seed=7, **search),
            "launch": load_target(SEARCH_TOML).launch,
        }
    )
    target = target.model_copy(update={"launch": target.launch.model_copy(update={"argv": ARGV})})
    diagnosis = Diagnosis(
        findings=[
            Finding(
                playbook=p,
                title=p,
                confidence=0.9,
                expected_gain_share=0.5,
                expected_gain_ms=None,
                explanation="",
                evidence=[],
            )
            for p in findings
        ],
        top_ops=[],
        time_basis="cpu",
    )
    opts = LoopOptions(session_dir=tmp_path, python="python3", search_without_math=True)
    return LoopState(
        session_id="s1", target=target, options=opts, diagnosis=diagnosis, decisions=list(decisions)
    )


def decided(n: int, argv: list[str], tpot: float | None, verdict: str = "rejected") -> Decision:
    return Decision(
        iteration=1,
        source=f"search-{n}",
        verdict=verdict,
        reason="r",
        tpot_ms_after=tpot,
        launch_argv=argv,
        outputs_identical=tpot is not None,
    )


def test_first_trial_sets_the_knobs_the_diagnosis_implicates(tmp_path: Path) -> None:
    s = state(tmp_path, findings=("kv-cache-full-pool-cast",))
    p, what = search_proposal(s)
    assert p is not None and p.source == "search-1" and p.diff == ""
    assert p.launch_argv == [*ARGV, "--max-total-tokens", "4096"] and what == "--max-total-tokens 4096"
    assert "implicates" in p.explanation
    tpe = search_proposal(state(tmp_path))[0]  # nothing implicated: TPE over every knob
    assert tpe is not None and set(config_of(tpe.launch_argv or [], knobs())) >= {"--max-running-requests"}


def test_the_same_history_gives_the_same_trials_and_none_twice(tmp_path: Path) -> None:
    history: list[Decision] = []
    seen = {tuple(ARGV)}
    for n in range(1, 9):
        s = state(tmp_path, history, startup_trials=3)
        assert s.target.search is not None
        config = next_config(s, s.target.search)
        assert config is not None and config == next_config(
            state(tmp_path, history, startup_trials=3), s.target.search
        )
        argv = with_config(ARGV, knobs(), config)
        assert tuple(argv) not in seen
        seen.add(tuple(argv))
        # a made-up objective: smaller pools and more running requests are faster; n = 3 failed
        tokens, running = config["--max-total-tokens"], config["--max-running-requests"]
        assert isinstance(tokens, int) and isinstance(running, int)
        tpot = None if n == 3 else tokens / 1000 + 8 / running
        history.append(decided(n, argv, tpot, "failed" if tpot is None else "rejected"))
    other = state(tmp_path, history[:4]).model_copy(
        update={
            "target": state(tmp_path).target.model_copy(
                update={"search": SearchConfig(knobs=knobs(), seed=8)}
            )
        }
    )
    first = state(tmp_path).target.search
    assert other.target.search is not None and first is not None
    assert next_config(other, other.target.search) != next_config(state(tmp_path, history[:4]), first)
    lines = trial_lines(state(tmp_path, history))
    assert len(lines) == 8 and lines[2].endswith("not measured -> failed") and "TPOT" in lines[0]


def test_budget_and_exhaustion_stop_the_search(tmp_path: Path) -> None:
    two = [
        decided(1, [*ARGV, "--max-total-tokens", "4096"], 5.0),
        decided(2, [*ARGV, "--max-total-tokens", "8192"], 6.0),
    ]
    p, why = search_proposal(state(tmp_path, two, max_trials=2))
    assert p is None and why == "search budget spent: 2 of 2 trials"
    s = state(tmp_path, max_launches=2).model_copy(update={"launches": 1})  # interleaved arms: 2 per trial
    assert search_proposal(s) == (
        None,
        "search budget spent: 1 launches, a trial needs 2 more (max_launches 2)",
    )
    tiny = [Knob(name="--disable-cuda-graph", type="bool")]
    s = state(tmp_path, [decided(1, [*ARGV, "--disable-cuda-graph"], 5.0)])
    s = s.model_copy(update={"target": s.target.model_copy(update={"search": SearchConfig(knobs=tiny)})})
    assert search_proposal(s) == (None, "search space exhausted after 1 trials")


def test_bad_search_config_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="type int needs low < high"):
        Knob(name="--x", type="int", low=4, high=2)
    data = load_target(SEARCH_TOML).model_dump()
    data["search"]["knobs"].append(
        {"name": "--attention-backend", "type": "choice", "choices": ["a", "b"], "numerics": True}
    )
    data["correctness"]["policy"] = "numerics"
    type(load_target(SEARCH_TOML)).model_validate(data)  # the numerics policy judges the math it moves
    data["correctness"]["policy"] = "exact"
    with pytest.raises(ValueError, match='needs \\[correctness\\] policy = "numerics"'):
        type(load_target(SEARCH_TOML)).model_validate(data)
    plain = load_target(SEARCH_TOML.with_name("mla_server.toml"))
    with pytest.raises(ConfigError, match="--proposer search needs a \\[search\\] section"):
        with_proposer(plain, mode="search")
    assert with_proposer(load_target(SEARCH_TOML), mode="search").proposer.mode == "search"


def test_propose_mixes_the_search_after_the_playbooks(tmp_path: Path) -> None:
    """`auto` (no model): the playbook's patch first, the search once it is tried; `search`: the
    search only; the trial's launch command is what `apply` runs."""

    def run(s: LoopState, mode: str):
        s = s.model_copy(
            update={"target": s.target.model_copy(update={"proposer": ProposerConfig(mode=mode)})}
        )
        door = LiveDoor("s", MemoryRecorder())
        door.node = "propose"
        return propose(s, SimpleNamespace(context=LoopContext(door=door)))

    s = state(tmp_path, findings=("kv-cache-full-pool-cast",))
    assert run(s, "auto").update["proposal"].source == "kv-cache-full-pool-cast"
    searched = run(s, "search").update["proposal"]
    assert searched.source == "search-1" and searched.launch_argv[-2:] == ["--max-total-tokens", "4096"]
    tried = Decision(iteration=1, source="kv-cache-full-pool-cast", verdict="rejected", reason="r")
    after = run(state(tmp_path, [tried], findings=("kv-cache-full-pool-cast",)), "auto")
    assert after.goto == "approve" and after.update["proposal"].source == "search-1"
    assert after.update["transitions"][0].note.startswith("search trial 1: --max-total-tokens 4096")
    spent = run(
        state(tmp_path, [tried], findings=("kv-cache-full-pool-cast",), max_trials=1).model_copy(
            update={"decisions": [tried, decided(1, [*ARGV, "--max-total-tokens", "4096"], 5.0)]}
        ),
        "search",
    )
    assert spent.goto == "finish" and spent.update["stop_reason"] == "search budget spent: 1 of 1 trials"


def test_a_budget_in_minutes_starts_no_trial_that_would_end_past_it(tmp_path: Path) -> None:
    """`max_minutes`: the time is read through the door (`host.clock`, so a replay reads the
    recorded one) at each search proposal; the next trial is not started when the elapsed time
    plus the longest trial so far passes the budget; without it no clock is read."""
    two = [
        decided(1, [*ARGV, "--max-total-tokens", "4096"], 5.0),
        decided(2, [*ARGV, "--max-total-tokens", "8192"], 6.0),
    ]

    def run(s: LoopState) -> tuple[Command[Goto], list[str]]:
        s = s.model_copy(
            update={"target": s.target.model_copy(update={"proposer": ProposerConfig(mode="search")})}
        )
        recorder = MemoryRecorder()
        door = LiveDoor("s", recorder)
        door.node = "propose"
        cmd = propose(s, SimpleNamespace(context=LoopContext(door=door)))
        return cmd, [c.name for c in recorder.calls]

    now = time.time()
    # two trials began 100 and 50 s ago: 100 s spent, 50 s the longest, 10 minutes allowed
    going = state(tmp_path, two, max_minutes=10).model_copy(update={"search_clock": [now - 100, now - 50]})
    cmd, calls = run(going)
    assert cmd.update is not None
    assert calls == ["host.clock"] and cmd.update["proposal"].source == "search-3"
    clock = cmd.update["search_clock"]
    assert clock[:2] == [now - 100, now - 50] and now <= clock[2] <= time.time()
    # 500 s spent, and the second trial took 300 s: 800 s would pass 600
    late = going.model_copy(update={"search_clock": [now - 500, now - 300]})
    cmd, _ = run(late)
    assert cmd.goto == "finish" and cmd.update is not None
    assert cmd.update["stop_reason"] == "search budget spent: 8.3 of 10 minutes, and a trial took up to 5.0"
    assert late.target.search is not None
    assert budget_left(late, late.target.search, now - 300) is None  # the same at the second trial's start
    assert run(state(tmp_path, two))[1] == []  # no max_minutes: no clock read, the records as before


def test_host_bound_decode_implicates_the_batch_cap_and_predicts_its_gain_bound(tmp_path: Path) -> None:
    """vLLM's phase scopes said host-bound: the first trial raises the sequences per step, and its
    prediction is the batching bound at the workload's concurrency (the decision carries it)."""
    cap = Knob(name="--max-running-requests", type="choice", choices=[1, 2, 8], first=8)
    phases = DecodePhases(
        steps=10, step_ms=2.0, phase_ms={"preprocess": 1.2, "forward": 0.6}, host_ms=1.4, forward_ms=0.6,
        host_bound=True,
    )  # fmt: skip
    s = state(tmp_path)
    base = s.target.model_copy(
        update={
            "search": SearchConfig(knobs=[cap], seed=7),
            "workload": WorkloadConfig(concurrency=4, requests=8),
            "launch": s.target.launch.model_copy(update={"argv": [*ARGV, "--max-running-requests", "1"]}),
        }
    )
    assert s.diagnosis is not None
    host_bound = s.model_copy(
        update={"target": base, "diagnosis": s.diagnosis.model_copy(update={"decode_phases": phases})}
    )
    p, what = search_proposal(host_bound)
    assert p is not None and what == "--max-running-requests 8" and "implicates" in p.explanation
    assert p.predicted_speedup == 4.0 and "at most 4.00x output throughput" in p.explanation  # min(4, 8) / 1
    assert "host-bound decode" in p.explanation
    model_bound = phases.model_copy(update={"host_bound": False})
    other = host_bound.model_copy(
        update={"diagnosis": s.diagnosis.model_copy(update={"decode_phases": model_bound})}
    )
    q = search_proposal(other)[0]  # not implicated: TPE's pick, still bounded when it changes the cap
    assert q is not None and "implicates" not in q.explanation
    assert q.predicted_speedup == batching_gain_bound(
        4, 1, int(config_of(q.launch_argv or [], [cap])[cap.name])
    )
    no_phases = host_bound.model_copy(update={"diagnosis": s.diagnosis})  # e.g. an SGLang trace
    assert search_proposal(no_phases)[0].predicted_speedup is None  # type: ignore[union-attr]


def beyond(n: int, argv: list[str], tpot: float) -> Decision:
    """A trial the numerics gate refused: its texts moved further than the engine moves them."""
    v = NumericsVerdict(verdict="beyond", max_dlogprob=0.9, engine_max_dlogprob=0.02)
    return decided(n, argv, tpot).model_copy(update={"numerics": v, "outputs_identical": False})


def test_a_trial_refused_for_its_math_is_tried_again_without_the_knob_that_moved_it(tmp_path: Path) -> None:
    """Issue 61: the pool and a math-moving knob bundled in one trial; the gate refuses the math, so the
    next trial is the same one without the declared knob, and a win there names that knob as measured."""
    math_knob = Knob(name="--enable-torch-compile", type="bool", first=True, numerics=True)
    s = state(tmp_path, findings=("kv-cache-full-pool-cast",))
    cfg = s.target.search.model_copy(update={"knobs": [*knobs(), math_knob]})  # type: ignore[union-attr]
    math_knob_implicated = math_knob.model_copy(update={"implicated_by": ["kv-cache-full-pool-cast"]})
    cfg = cfg.model_copy(update={"knobs": [*knobs(), math_knob_implicated]})
    numerics = s.target.correctness.model_copy(update={"policy": "numerics"})
    s = s.model_copy(update={"target": s.target.model_copy(update={"search": cfg, "correctness": numerics})})
    first, _ = search_proposal(s)
    assert first is not None and "--enable-torch-compile" in (first.launch_argv or [])
    refused = beyond(1, first.launch_argv or [], 5.0)
    s = s.model_copy(update={"decisions": [refused]})
    again, what = search_proposal(s)
    assert again is not None and again.launch_argv == [*ARGV, "--max-total-tokens", "4096"], what
    assert "without the knobs that moved the math" in again.explanation
    kept = decided(2, again.launch_argv or [], 4.0, verdict="accepted")
    s = s.model_copy(update={"decisions": [refused, kept]})
    assert math_movers(s, s.decisions) == ["--enable-torch-compile"]
    assert search_proposal(s)[0] is not None  # and the search goes on with TPE


def test_undeclared_knobs_are_dropped_one_at_a_time_and_a_passing_trial_is_no_refusal(tmp_path: Path) -> None:
    both = [*ARGV, "--max-total-tokens", "8192", "--disable-cuda-graph"]
    s = state(tmp_path, [beyond(1, both, 5.0)])
    again, _ = search_proposal(s)  # none declared: each changed knob dropped in turn, the first first
    assert again is not None and again.launch_argv == [*ARGV, "--disable-cuda-graph"]
    s = s.model_copy(update={"decisions": [*s.decisions, beyond(2, again.launch_argv, 5.0)]})
    third, _ = search_proposal(s)  # that one refused too: no follow-up of a follow-up of the same kind
    assert third is not None and third.launch_argv != again.launch_argv
    within = decided(1, both, 5.0).model_copy(
        update={"numerics": NumericsVerdict(verdict="within"), "outputs_identical": False}
    )
    assert not refused_for_math(within) and refused_for_math(beyond(1, both, 5.0))
    assert refused_for_math(decided(1, both, 5.0).model_copy(update={"outputs_identical": False}))


def test_max_minutes_counts_the_next_trial_at_its_plans_most_blocks(tmp_path: Path) -> None:
    """A first trial decided at its first look (50 s) says little of the next, which may run every
    block it plans: new sessions stop when that would end past `max_minutes` (the H100 search of
    2026-12-06 started a second trial 6 min into a 7-minute budget, cut at 9.4 min); recorded ones
    count the longest trial so far."""
    from tests.unit.aa_door import handle, measurement

    now = time.time()
    s = state(tmp_path, [decided(1, [*ARGV, "--max-total-tokens", "4096"], 5.0)], max_minutes=10)
    decide = s.target.decide.model_copy(update={"arms": "alternating", "max_launches_per_arm": 4})
    server = handle(2).model_copy(update={"startup_s": 20.0})
    reference = measurement("reference", tpot_ms=10_000.0)  # 6 requests of 3 x 10 s: 180 s measured
    s = s.model_copy(
        update={
            "target": s.target.model_copy(update={"decide": decide}),
            "server": server,
            "reference": reference,
            "search_clock": [now - 100],
            "options": s.options.model_copy(update={"search_worst_trial": True}),
        }
    )
    assert s.target.search is not None
    assert worst_trial_s(s, "alternating") == 4 * 2 * (20.0 + 180.03)  # 4 blocks of 2 launches
    assert worst_trial_s(s, "interleaved") == 0.0
    spent = budget_left(s, s.target.search, now)
    assert spent == (
        "search budget spent: 1.7 of 10 minutes, and the next may take 26.7 (its plan's most blocks; "
        "a trial took up to 1.7)"
    )
    cheap = s.model_copy(update={"reference": measurement("reference", tpot_ms=100.0)})  # 2 s a window
    assert budget_left(cheap, s.target.search, now) is None  # 100 s + 4 x 2 x 22 s < 600 s
    recorded = s.model_copy(update={"options": s.options.model_copy(update={"search_worst_trial": False})})
    assert budget_left(recorded, s.target.search, now) is None  # 100 s + the longest, 100 s


def test_a_block_is_priced_at_no_less_than_a_block_took_in_the_sessions_trials(tmp_path: Path) -> None:
    """The H200 search of 2026-12-06 (`benchmarks/h200-2026-12-06-numerics/`): trial 1 took 143.7 s
    over 2 blocks, but a block was priced at the kept candidate's launch and measurement, 2 x (8.6 +
    6.7) s, so trial 2 was counted at 2.4 min (the longest so far) and started 2.4 min into a 7-minute
    budget, and trial 3 at 4.3: the session was cut at 9.5 min. New sessions price a block at no less
    than the 71.9 s it took: 4 blocks, 4.8 min, and no second trial; recorded ones replay as run."""
    from state.measurement.arms import LaunchLocation
    from state.measurement.decision import Judgement, LaunchNoise
    from tests.unit.aa_door import handle, measurement

    arms = ["candidate", "reference", "reference", "candidate"]  # (C R | R C): 2 blocks
    judgement = Judgement(
        verdict="accepted", looks=[], launch_noise=LaunchNoise(sigma_log=0.01), min_gain=0.02,
        confidence=0.95, arms="alternating",
        per_launch=[LaunchLocation(arm=a, launch_number=4 + i, location_log=0.0) for i, a in enumerate(arms)],
    )  # fmt: skip
    trial = decided(1, [*ARGV, "--max-total-tokens", "4096"], 5.0, "accepted").model_copy(
        update={"judgement": judgement}
    )
    now = 1796594355.97  # trial 2's proposal, on the recorded clock
    s = state(tmp_path, [trial], max_minutes=6)
    decide = s.target.decide.model_copy(update={"arms": "alternating", "max_launches_per_arm": 4})
    s = s.model_copy(
        update={
            "target": s.target.model_copy(update={"decide": decide}),
            "server": handle(7).model_copy(update={"startup_s": 8.6}),
            "reference": measurement("reference", tpot_ms=1.0),
            "search_clock": [1796594212.25],
            "options": s.options.model_copy(
                update={"search_worst_trial": True, "search_block_measured": True}
            ),
        }
    )
    assert s.target.search is not None
    assert worst_trial_s(s, "alternating", now) == pytest.approx(4 * 143.72 / 2, abs=0.01)
    assert budget_left(s, s.target.search, now) == (
        "search budget spent: 2.4 of 6 minutes, and the next may take 4.8 (its plan's most blocks; "
        "a trial took up to 2.4)"
    )
    recorded = s.model_copy(update={"options": s.options.model_copy(update={"search_block_measured": False})})
    assert worst_trial_s(recorded, "alternating", now) < 143.72  # priced at the launch and measurement
    assert budget_left(recorded, s.target.search, now) is None  # 2.4 + 2.4 < 6: the second trial starts
