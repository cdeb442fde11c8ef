"""The choices a session was started with (`LoopState.options`)."""

from pathlib import Path
from typing import Literal

from pydantic import Field

from state.base import Model


class LoopOptions(Model):
    """Choices made when the session was started."""

    approve: Literal["auto", "manual"] = "auto"
    """`auto` applies proposals at once; `manual` pauses for `perfloop approve|reject`."""
    max_iterations: int = Field(3, ge=1)
    """Upper bound on profile/diagnose rounds."""
    floor_ms: float | None = Field(default=None, gt=0)
    """The step's roofline floor in ms, as the user states it (e.g. the weights read once at the
    device's bandwidth); None: no floor-based stop."""
    floor_factor: float = Field(default=2.0, ge=1)
    """Stop once the accepted TPOT is within this factor of `floor_ms`."""
    playbook_dirs: list[Path] = Field(default_factory=list)
    """Extra playbook directories, searched after the built-in catalog."""
    playbook_files: dict[str, str] = Field(default_factory=dict)
    """The extra directories' playbook files as read when the session started (path under a
    `playbook_dirs` entry -> text): what the session loads and patches with from then on, so that a
    resume, an export and a replay need no folder outside the recording; sessions recorded before
    it carry none and read the folders."""
    session_dir: Path
    """Where this session keeps logs, traces and measurements."""
    host_dir: Path | None = None
    """On a remote target host: where the server's logs, pid file and profiler files live
    (`~/.perfloop/sessions/<id>` there); None for the local host (then `session_dir`)."""
    demo_source: Path | None = None
    """For `perfloop demo`: the embedded target tree copied into a new repo at `target.repo`."""
    python: str
    """Interpreter substituted for `{python}` in launch commands (recorded, so replay matches)."""
    builtin_playbooks: bool = True
    """Whether the built-in playbook catalog is searched (tests turn it off to isolate theirs)."""
    parallel: int | None = Field(default=None, ge=1)
    """Most candidates tried at once on the target's `[[hosts]]` (`--parallel`); None: one per host."""
    decision_rule: Literal["iqr-v0", "ci-v1"] = "iqr-v0"
    """How candidates are judged (agent/decision/rules.py): `ci-v1` for new sessions; sessions recorded
    before it carry none and replay with the rule they were decided by, `iqr-v0`."""
    long_prompts: bool = False
    """Whether the correctness set reaches the context limit (`[correctness] long_prompts`,
    agent/decision/gate/correctness.py): True for new sessions; sessions recorded before it carry none
    and replay with the set they were checked on."""
    power: bool = False
    """Whether the baseline step gathers A/A pairs (interleaved arms), reports the session's power
    and sizes requests and looks by `[decide] keep_gain` (agent/decision/calibration/autoaa.py): True for new
    sessions; sessions recorded before it carry none and replay without."""
    short_aa_pairs: bool = False
    """Whether the A/A pairs beside the baseline are measured with one look's requests (`repeats`
    per prompt) rather than the reference's whole budget (`repeats x looks`): a pair's shift is
    the launch's effect, which more requests on the same two launches do not reduce; on one H200 the
    three pairs of a new host took 3 x 78 s of a 4.8-minute baseline with the whole budget: True
    for new sessions; sessions recorded before it carry none and replay as they ran."""
    first_verdict: bool = False
    """Whether a first session on a host can reach a verdict (agent/decision/arms/blocks.py,
    agent/decision/calibration/autoaa.py): paired blocks' baseline measured with one look's requests
    (`repeats`, what each block's launch gets) and its A/A launch, like the A/A pairs beside an
    interleaved baseline, with the fewest requests whose sampling error the launch noise's floor
    swamps (`power.calibration_requests`: one per prompt on a GPU host); each trial's blocks planned
    for at least `blocks.FIRST_VERDICT_LOOKS` looks where the budget allows, stopping at the first
    that decides: True for new sessions; sessions recorded before it carry none and replay as
    they ran."""
    search_grid: bool = False
    """Whether the launch-option search, when TPE keeps asking for tried configurations, takes an
    untried one of the knobs' grid, and calls the space exhausted only when every configuration of
    it was tried (agent/proposer/tuning/search.py): True for new sessions; sessions recorded before
    it carry none and replay as they ran (stopped after 20 repeated asks)."""
    search_without_math: bool = False
    """Whether a search trial refused for its math is followed by the same trial without the knobs
    that moved it (agent/proposer/tuning/refusals.py): True for new sessions; recorded sessions
    carry none and replay as they ran."""
    confirm_alone: bool = False
    """Whether interleaved arms stop the running candidate before a confirming pair of launches, so
    no more than two servers hold the device at once (three glm5 servers do not fit an 80 GB H100):
    True for new sessions; sessions recorded before it carry none and replay as they ran."""
    schedule_gate: bool = False
    """Whether the output gate tells the math from the schedule (agent/decision/gate/schedule.py):
    texts alone compared exactly, batched texts (at once and staggered) held to the baseline's own
    variation across those schedules, timing texts whose schedule follows the speed not compared
    text by text: True for new sessions; sessions recorded before it carry none and replay with
    the exact gate they were checked by."""
    output_noise_store: bool = False
    """Whether the baseline's A/A on outputs (`schedule_gate`) is kept in the session store and the
    plan states every baseline of its host and engine (agent/decision/gate/outputs.py `published`,
    one door call): True for new sessions; sessions recorded before it carry none and replay with
    the calls they made."""
    aa_evidence: bool = False
    """Whether more launches are kept as A/A evidence (agent/decision/arms/aalaunches.py): alternating
    arms' replicate launches, and with sequential arms one A/A launch at the baseline while the
    store holds no measured launch noise of the target on its host: True for new sessions;
    sessions recorded before it carry none and replay without."""
    paired_blocks: bool = False
    """Whether alternating arms are judged as paired blocks with pooled noise and a weak prior, and
    the baseline prints the trial plan from what a launch costs (agent/decision/stats/blocks.py,
    agent/decision/arms/blocks.py); sequential arms on a server that holds GPU memory are then not
    widened by the CPU probe: True for new sessions; sessions recorded before it carry none and
    replay as they ran (alternating arms' replicates, the probe everywhere)."""
    reference_host_aa: bool = False
    """Whether cross-host arms plan and judge with both hosts' A/A launches, the reference host's
    read from the store too (agent/decision/arms/crosshost.py): True for new sessions; sessions
    recorded before it carry none and replay with the session host's alone."""
    launch_allowlist: bool = False
    """Whether a model's `LAUNCH:` lines may change only its target kind's allowlisted flags and
    `[proposer] launch_flags`, spelled in full (playbooks/flags.py): True for new sessions;
    sessions recorded before it replay with any flag but the fixed ones and their prefixes."""
    release_servers_when_paused: bool = False
    """Whether a session paused for approval stops its servers while it waits, and approving
    launches them again (`agent/sessions/runner.py`): True for new sessions unless
    `--keep-servers-when-paused`; sessions recorded before it carry none and keep them."""
    mechanism_ms: bool = False
    """Whether the mechanism check's line (`MechanismCheck.note`, agent/decision/stats/mechanism.py)
    gives its times in ms per step, as `perfloop analyze` does: True for new sessions; sessions
    recorded before it carry none and replay with the us/step line they recorded."""
    mechanism_range: bool = False
    """Whether the mechanism check calls a mechanism confirmed only when the realized reduction lies
    in the prediction's range, saying how far off it was otherwise (agent/decision/stats/mechanism.py):
    True for new sessions; sessions recorded before it replay with the half-of-it test."""
    give_back_checkout: bool = False
    """Whether an ended session (done or failed) switches the checkout back to the branch it was
    found on, its accepted commits kept on the session branch (`agent/steps/end.py`): True for new
    `run` sessions (the demo's copy stays on its branch); sessions recorded before end on their branch."""
    launches_past_cuts: bool = False
    """Whether a resumed session numbers its launches past every number an attempt cut short had
    used (the store's `cut` inputs, `SessionStore.supersede_after`; `agent/context.py` `step`), so
    no launch number, log or server mark is used twice: True for new sessions; sessions recorded
    before it replay numbering from the checkpoint (a cut attempt's numbers again)."""
    numerics_math_distance: bool = False
    """Whether the numerics gate, where a float32 precision reference was measured, judges a candidate
    by its distance from the float32 math over the baseline's (agent/decision/gate/moves.py): True
    for new sessions; sessions recorded before it replay judged by the engine's own moves alone."""
    numerics_unit_floor: bool = False
    """Whether the engine-moves numerics test holds a prompt no schedule moved to one unit of the
    logits' rounding rather than to zero (agent/decision/gate/moves.py): True for new sessions;
    sessions recorded before it replay judged against zero there."""
    search_worst_trial: bool = False
    """Whether the search's `max_minutes` counts the next trial at its plan's most blocks when that
    is longer than any trial so far (agent/proposer/tuning/budget.py), so no trial starts that could
    end past it: True for new sessions; sessions recorded before it counted the longest so far."""
    search_block_measured: bool = False
    """Whether that count prices a block at no less than the most a block took in the session's
    judged trials (`budget.block_taken_s`): True for new sessions; sessions recorded before priced
    it at the running server's launch and the reference's measurement alone."""
    precise_small: bool = False
    """Whether the precision reference launches with the engine's flags that shrink what it holds
    (`EngineContract.precise_small`: the demo's KV pool), so a float32 copy of glm5's 78 layers fits
    beside the baseline on one 80 GB card: True for new sessions; sessions recorded before launched
    it with the float32 flags alone, and replay so."""
