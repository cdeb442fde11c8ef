"""The format of `playbooks/catalog/<id>/playbook.toml`: a known bottleneck, its signature, its fix."""

import re
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from playbooks.flags import not_fixed
from state.base import Model

MODEL_ID = re.compile(r"llm(-[0-9]+)?")
"""Ids of model-written candidates (`llm`, `llm-1`, ... one a host in a round); no playbook's."""
SEARCH_ID = re.compile(r"search-[0-9]+")
"""Ids of the launch-option search's trials (`search-1`, ...); no playbook's."""

NOTE_FIELDS = {
    "op": "aten::copy_",
    "dims": "[[8, 1, 576]]",
    "share_pct": 50.0,
    "calls": 1,
    "self_ms_per_step": 1.0,
    "first_dim": 8,
    "active_tokens": 1,
    "pool_ratio": 8.0,
    "basis": "device",
    "calls_per_step": 1.0,
    "types": "c10::BFloat16 <- c10::Float8_e4m3fn",
    "location": "model.py:12 (forward)",
    "idle_pct": 40.0,
    "median_kernel_us": 3.0,
    "kernels_per_step": 100.0,
    "gaps": 10,
    "launch_ms_per_step": 1.0,
    "caller": "aten::item",
    "issue_ms_per_step": 85.0,
    "device_ms_per_step": 81.0,
    "ranks": 2,
    "collective_pct": 10.0,
    "spread_pct": 5.0,
    "wait_ms_per_step": 1.0,
    "transfer_ms_per_step": 1.0,
    "straggler": "1",
}
"""Names an evidence note template may use, with sample values used to check templates on load."""


class Signature(Model):
    """What a profile must show for the playbook to apply; all given conditions must hold."""

    op_names: list[str] = []
    """Regular expressions (re.search) for the operator or kernel names (empty: signals only)."""
    min_share: float = Field(default=0.0, ge=0, le=1)
    """Least combined share (0..1) of the matching operator groups."""
    dims_rank: int | None = None
    """Required number of dims of the group's first tensor input."""
    dims_tail: list[int] | None = Field(default=None, min_length=1)
    """Required trailing dims of the first tensor input, e.g. [1, 576]."""
    first_dim_over_active_tokens_min: float | None = None
    """Least ratio of the first tensor input's first dim to the active tokens (a whole-pool op)."""
    dtype_change: Literal["widen", "narrow"] | None = None
    """For copy ops (inputs dst, src): the dst dtype must be wider ("widen", an upcast) or narrower
    than the src dtype."""
    input_type: str | None = None
    """Regular expression (re.search) the group's first input dtype must match, e.g. `^float$`."""
    min_calls_per_step: float | None = None
    """Least calls per profiled step of each matching group (work repeated every step)."""
    device_idle_share_min: float | None = None
    """Least idle fraction of the device between kernels (DeviceActivity.idle_share)."""
    median_kernel_us_max: float | None = None
    """Most median kernel duration, in microseconds (short kernels)."""
    min_decode_syncs_per_step: float | None = None
    """Least host-device syncs per step inside the decode path."""
    issue_over_device_min: float | None = None
    """Least ratio of the host's time to issue a step's kernels to the device's time running them
    (StepBounds.issue_us / device_us): near or above 1 the host launches bound the step. On a trace
    without step markers, the default launch-bound verdict (DeviceActivity.launch_bound) stands in."""
    collective_share_min: float | None = Field(default=None, ge=0, le=1)
    """Least share of the ranks' busy time spent in collectives (CollectiveStats.share); only a
    multi-rank profile can hold it."""
    straggler_wait_min: float | None = Field(default=None, ge=0)
    """Least time the ranks wait in collectives for the last one to arrive, as a fraction of the
    median rank step (CollectiveStats.wait_us / median rank_step_us)."""
    dense_experts: bool = False
    """Keep only matmul groups that project every expert for every token: the profile routes top-k
    over E experts (`aten::topk` on `[tokens, E]`), runs an activation on `[tokens, E, ffn]`, and the
    group's weight has E x 2 x ffn outputs (every expert's gate and up; `playbooks.match.dense_experts`)."""

    @model_validator(mode="after")
    def _something_to_match(self) -> "Signature":
        """A signature needs op names or at least one device or sync condition."""
        signals = (
            self.device_idle_share_min,
            self.median_kernel_us_max,
            self.min_decode_syncs_per_step,
            self.issue_over_device_min,
            self.collective_share_min,
            self.straggler_wait_min,
        )
        if not self.op_names and all(v is None for v in signals):
            raise ValueError(
                "give op_names or one of device_idle_share_min, median_kernel_us_max, "
                "min_decode_syncs_per_step, issue_over_device_min, collective_share_min, straggler_wait_min"
            )
        return self

    @field_validator("op_names")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        """Reject patterns that are not valid regular expressions."""
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"{pattern!r} is not a valid regular expression: {err}") from err
        return patterns


class CastFractionGain(Model):
    """A whole-pool cast that a gather-then-cast fix shrinks to the active rows."""

    kind: Literal["cast_fraction"]
    """Expected gain share = matched share x (1 - active_tokens / N), N the pool's first dim."""


class MatchedShareGain(Model):
    """Work a fix removes outright (e.g. a cast moved to load time)."""

    kind: Literal["matched_share"]
    """Expected gain share = factor x the matched groups' share."""
    factor: float = Field(default=1.0, ge=0, le=1)
    """Fraction of the matched time the fix removes."""


class DeviceIdleGain(Model):
    """Device idle time between kernels that a fix (e.g. CUDA graphs) removes."""

    kind: Literal["device_idle"]
    """Expected gain share = factor x idle time between kernels / decode time."""
    factor: float = Field(default=0.8, ge=0, le=1)
    """Fraction of the idle time the fix removes."""


class SyncWaitGain(Model):
    """Host time blocked in decode-path syncs that a fix removes."""

    kind: Literal["sync_wait"]
    """Expected gain share = factor x host time in decode syncs / decode time."""
    factor: float = Field(default=1.0, ge=0, le=1)
    """Fraction of the blocked time the fix removes."""


class FusionGain(Model):
    """Short kernels a compiler fuses (torch.compile): fewer launches, fewer passes over memory."""

    kind: Literal["fusion"]
    """Fewer kernels and less device time among the kernels whose names match `kernel_names`."""
    kernel_names: list[str] = Field(min_length=1)
    """Regular expressions (re.search) for the kernels a compiler fuses (elementwise, reductions)."""
    kernels_factor: float = Field(default=0.7, ge=0, le=1)
    """Fraction of the matching kernels the fusion removes."""
    device_factor: float = Field(default=0.5, ge=0, le=1)
    """Fraction of the matching kernels' device time the fusion removes (fewer memory passes)."""
    factor: float = Field(default=0.3, ge=0, le=1)
    """Expected gain share where the trace has no step bounds (a CPU trace): factor x the matching share."""


class CollectiveGain(Model):
    """Collective time a fix removes, from the ranks' CollectiveStats."""

    kind: Literal["collective_transfer", "collective_wait"]
    """`collective_transfer`: factor x the collectives' own time (the least of any rank: it waits
    for no one), e.g. half of it for a message half as large; waiting for a slower rank is not
    removed. `collective_wait`: factor x the time ranks wait for the last one (a straggler)."""
    factor: float = Field(default=0.5, ge=0, le=1)
    """Fraction of that time the fix removes."""


Gain = Annotated[
    CastFractionGain | MatchedShareGain | DeviceIdleGain | SyncWaitGain | FusionGain | CollectiveGain,
    Field(discriminator="kind"),
]


class GraphSignature(Model):
    """How the bottleneck shows when decode replays CUDA graphs: kernels but no operators (no
    dims) inside the replay, so only kernel names and their share."""

    kernel_names: list[str] = Field(min_length=1)
    """Regular expressions (re.search) for the kernels involved."""
    min_share: float = Field(default=0.0, ge=0, le=1)
    """Least combined share (0..1) of all kernel time of the matching kernels replayed in graphs."""
    confidence: float = Field(ge=0, le=1)
    """How sure such a match is (lower than the full signature's: no dims to check)."""
    factor: float = Field(default=1.0, ge=0, le=1)
    """Fraction of the matching kernels' device time the fix removes."""


class LaunchLimit(Model):
    """A launch option under which the playbook's patch for one target kind does not work: the
    loop says why and does not propose it there."""

    kind: str
    """Target kind the limit is for, e.g. `sglang`."""
    flag: Annotated[str, AfterValidator(not_fixed)] = Field(pattern=r"^--[a-z0-9][a-z0-9-]*$")
    """A command-line flag of `launch.argv`, e.g. `--disable-cuda-graph` (never a fixed one)."""
    refuse_when: Literal["present", "absent", "above"]
    """`present`/`absent`: the flag is (not) in argv; `above`: its value is a number above `value`."""
    value: float = 0
    """Threshold for `above`."""
    reason: str
    """Why the patch does not work there and what to change, shown to the user."""


class LaunchEdit(Model):
    """One change of the server's launch command that a playbook's fix makes (no code changes)."""

    flag: Annotated[str, AfterValidator(not_fixed)] = Field(pattern=r"^--[a-z0-9][a-z0-9-]*$")
    """A command-line flag of `launch.argv`, e.g. `--disable-cuda-graph` (never a fixed one)."""
    action: Literal["remove", "raise"]
    """`remove`: drop the flag (and its value); `raise`: a number below `value` set to `value`
    (absent: the server's default stands)."""
    value: float = 0
    """Target number for `raise`."""


class Playbook(Model):
    """A known bottleneck and its fix, as stored in the catalog."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Stable id, the playbook's folder name; never `llm`, `llm-N` (model-written candidates)."""
    title: str
    """One-line title of the finding."""
    titles: dict[str, str] = {}
    """Target kind -> the title there, where `title` does not fit (`title_for`)."""
    explanation: str
    """What the bottleneck is, why it happens and how the patch fixes it."""
    confidence: float = Field(ge=0, le=1)
    """How sure a full signature match is (0..1)."""
    signature: Signature
    """What the profile must show."""
    evidence_note: str
    """Template (str.format) of each evidence line (names in NOTE_FIELDS)."""
    gain: Gain
    """How to estimate the share of decode time the fix removes."""
    graph_signature: GraphSignature | None = None
    """Where the step replays CUDA graphs and `signature` finds no operators: match by kernel names."""
    patches: dict[str, str] = {}
    """Target kind (SGLang's by release, "sglang@X.Y.Z": playbooks/patches.py) -> patch file."""
    patch_paths: dict[str, list[Literal["eager-decode", "graph-decode", "extend"]]] = {}
    """`patches` key -> the paths its patch changes (playbooks/patches.py `covering`); unlisted: all."""
    launch_limits: list[LaunchLimit] = []
    """Launch options under which a patch is not proposed (see LaunchLimit)."""
    launch: dict[str, list[LaunchEdit]] = {}
    """Target kind -> the launch-command change that is the fix there (instead of a patch)."""
    binary_patches: bool = False
    """Whether its patches may hold binary hunks (the patch gate refuses them otherwise)."""
    exact: bool = False
    """The fix declares itself exact: the numerics gate then passes only an `exact` verdict."""
    source_dir: str = ""
    """Folder the playbook was loaded from; set by load_playbooks, never written in playbook.toml."""

    def title_for(self, kind: str) -> str:
        """The title on a target of `kind` (for "sglang@X" `titles["sglang"]`), else `title`."""
        return self.titles.get(kind) or self.titles.get(kind.partition("@")[0]) or self.title

    @model_validator(mode="after")
    def _one_fix_per_kind(self) -> "Playbook":
        """A target kind gets a patch or a launch change, not both."""
        if both := sorted(set(self.patches) & set(self.launch)):
            raise ValueError(f"kinds {both} have both a patch and a launch change; keep one")
        return self

    @field_validator("id")
    @classmethod
    def _not_a_model_id(cls, value: str) -> str:
        """`llm` and `llm-N` are the ids of model-written candidates."""
        if MODEL_ID.fullmatch(value):
            raise ValueError(f"{value!r} is reserved for model-written candidates: rename the playbook")
        if SEARCH_ID.fullmatch(value):
            raise ValueError(f"{value!r} is reserved for launch-option search trials: rename the playbook")
        return value

    @field_validator("evidence_note")
    @classmethod
    def _known_fields(cls, template: str) -> str:
        """Reject templates that use names the engine does not provide."""
        try:
            template.format(**NOTE_FIELDS)
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(
                f"template {template!r} fails with sample values ({err!r}); use only {', '.join(NOTE_FIELDS)}"
            ) from err
        return template

    @field_validator("patches")
    @classmethod
    def _relative(cls, patches: dict[str, str]) -> dict[str, str]:
        """Keep patch paths inside the playbook folder."""
        for kind, rel in patches.items():
            path = PurePosixPath(rel)
            if path.is_absolute() or ".." in path.parts:
                raise ValueError(f"patch for {kind!r} must be a path inside the playbook folder, got {rel!r}")
        return patches
