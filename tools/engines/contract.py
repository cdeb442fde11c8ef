"""The engine contract: what perfloop needs to know of a served engine, stated once per engine.

An engine is one object, registered under its target kind in the `perfloop.engines` entry-point
group (registry.py). Generic code asks it instead of branching on the kind (docs/engines.md,
"What is left", names the few places that still do): which launch flags a model, playbook or
search may change (and how the engine spells a flag), how readiness is judged, where the dormant
profiler hook goes and where the API profiler writes its traces, which trace markers and phase
scopes it emits, which serving benchmark of its own runs beside perfloop's client, and how it
states its context limit. Everything has a default but the name, so a minimal engine is a
subclass with `name` set. docs/engines.md says how to add one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from state.engines.sglang import HookSite
from state.engines.vllm import DecodePhases
from state.measurement.floor import ModelFootprint
from state.measurement.measure import RequestRecord
from state.measurement.workload import WorkloadConfig
from tools.engines.benchrun import BenchRun

Runs = list[tuple[list[RequestRecord], float]]
"""A serving benchmark's runs: each run's requests (request i sent prompt i) and its duration (s)."""


@dataclass(frozen=True)
class BenchClient:
    """An engine's own serving benchmark, run beside perfloop's client (`measure.bench_serving`)."""

    needs: str
    """What the benchmark's python must have, for an error line: `sglang with bench_serving`."""
    find: Callable[[str], tuple[str, str] | None]
    """(module, engine version) of the benchmark in interpreter `python`, or None without one."""
    run: Callable[[BenchRun], Runs]
    """`repeats` runs of `num_prompts` seeded prompts (under `[workload]` one window each)."""
    window_requests: Callable[[WorkloadConfig], int]
    """Requests per `[workload]` window (its runs are counted, not timed); ConfigError where the
    benchmark cannot draw that workload."""
    client: str
    """How a measurement names it, `{module}` and `{version}` filled: `vllm bench serve (vllm {version})`."""

    def client_name(self, module: str, version: str) -> str:
        """`client` filled."""
        return self.client.format(module=module, version=version)


class Engine:
    """An LLM serving engine as perfloop drives it. Subclass, set `name`, override what differs."""

    name: ClassVar[str] = ""
    """The target kind this engine serves (`kind = "..."` in a target file) and its entry-point name."""

    changeable_flags: ClassVar[tuple[str, ...]] = ()
    """Launch flags that change speed, not what is served or where: a model, playbook or search may
    set or drop them (playbooks/flags.py checks every edit; `[proposer] launch_flags` adds more)."""

    fixed_flags: ClassVar[tuple[str, ...]] = ()
    """Flags of this engine that no edit may touch, beyond the common `playbooks.flags.FIXED`
    (where the server listens, what model and code it loads)."""

    batch_flag: ClassVar[str | None] = None
    """The flag that caps the sequences decoded in one step (the batching prediction reads it)."""

    deterministic: ClassVar[tuple[str, ...]] = ()
    """How this engine is launched batch-invariant (a greedy output the same whatever shares its
    decode steps): flags, or `NAME=VALUE` environment settings; empty: it has no such mode. Slower,
    so a session's timed arms keep it only where the user's launch has it; the output gate states it
    (agent/decision/gate/schedule.py)."""

    def deterministic_in(self, argv: list[str], env: Mapping[str, str]) -> str | None:
        """The batch-invariant setting a launch carries (a flag of `argv` or a variable of `env`),
        or None (pure)."""
        for setting in self.deterministic:
            name, eq, value = setting.partition("=")
            if (eq and env.get(name) == value) or (not eq and setting in argv):
                return setting
        return None

    launch_defaults: ClassVar[Mapping[str, object]] = {}
    """How readiness is judged where the target file does not say: `[launch]` fields (e.g.
    `ready_completion = True`: a real completion, not `health_path` alone; `started_log`: the log
    line that says the server listens) applied when a target file is loaded."""

    bench_by_default: ClassVar[bool] = False
    """Whether `measure.bench_serving.use = "auto"` runs `bench` (when the target's python has it)."""

    context_fields: ClassVar[tuple[str, ...]] = ()
    """Where the server states its context limit, as tools/limits.py names a source (it asks every
    server each of them: `/v1/models max_model_len`, `/get_server_info context_len`, ...); empty: it
    states none, and `[correctness] context_tokens` says it."""

    logprobs: ClassVar[bool] = True
    """Whether the server returns OpenAI text-completion `logprobs` (top-k) of generated tokens: the
    numerics gate teacher-forces the baseline's texts through them (tools/tolerance/forced.py); an
    engine without them needs `[correctness] policy = "exact"` (refused before any launch)."""

    forced_path: ClassVar[str] = "decode"
    """How the numerics gate teacher-forces texts: `decode` (greedy decoding with a restart wherever
    the side leaves the text) or `prefill` (the text scored in one request: vLLM's `prompt_logprobs`)."""

    prefix_cache: ClassVar[bool] = False
    """Whether the engine keeps a prefix cache: the numerics gate then also scores a warm one."""

    precise: ClassVar[tuple[str, ...]] = ()
    """Launch flags that compute the same weights in float32 (a precision reference of the model's
    math, scored by the numerics gate beside the baseline); empty: the engine has none."""

    precise_small: ClassVar[tuple[str, ...]] = ()
    """Launch flags added after `precise` that shrink what the precision reference holds beside the
    baseline and cannot change its math (its KV pool: it scores a few short texts one at a time), so
    a float32 copy of a large model fits on the baseline's card."""

    def normalise_flag(self, flag: str) -> str:
        """`flag` as the engine's parser reads it. Default: `_` in the name read as `-` (vLLM's
        argparse does; the flag checks read that spelling for every engine, to be safe)."""
        name, eq, value = flag.partition("=")
        return name.replace("_", "-") + eq + value

    def hook_site(self, repo: Path, env: Mapping[str, str]) -> HookSite | None:
        """Where the dormant profiler goes in checkout `repo` (the per-step method it wraps), found
        from the tree; None: the target file's `[profile]` names it. ConfigError when it cannot be."""
        return None

    def api_trace_dir(self, argv: list[str], repo: Path) -> Path | None:
        """Where the engine's own profiler (`/start_profile`, profile method `api`) writes traces,
        as its launch command `argv` says; None: where `/start_profile` is told (the default)."""
        return None

    def decode_phases(self, trace: Path) -> DecodePhases | None:
        """The engine's decode-step markers and phase scopes read from a trace, or None when it
        emits none (or the trace holds none)."""
        return None

    def bench(self) -> BenchClient | None:
        """The engine's own serving benchmark, or None (perfloop's client only)."""
        return None

    def footprint(self, argv: list[str]) -> ModelFootprint | None:
        """The bytes a decode step of the model its launch command `argv` serves reads at least
        (weights, KV per token), for the memory-bandwidth floor (pure); None: the engine does not know
        its model's size (the floor then says so)."""
        return None
