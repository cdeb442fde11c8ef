"""The target: which engine checkout to optimize, where it runs, how to launch and measure it."""

from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from state.base import SECRET_NAME, Model
from state.engines.ssh import SSHHostConfig
from state.measurement.correctness import CorrectnessConfig
from state.measurement.decision import DecisionConfig
from state.measurement.workload import WorkloadConfig
from state.proposers.proposer import ProposerConfig
from state.proposers.search import SearchConfig


def refuse_secrets(env: dict[str, str], advice: str) -> dict[str, str]:
    """`env`, unless a variable looks like a secret written out literally (a `{...}` template is
    not); the error names it and gives `advice`."""
    for name, value in env.items():
        if SECRET_NAME.search(name) and "{" not in value:
            raise ValueError(f"{name} looks like a secret: {advice}")
    return env


class LocalHost(Model):
    """The machine perfloop runs on; commands run as subprocesses in their own process group."""

    kind: Literal["local"] = "local"
    """Discriminator of the host variant."""


Host = Annotated[LocalHost | SSHHostConfig, Field(discriminator="kind")]
"""Where the target runs: this machine, or a remote host over SSH."""


class TrialHost(Model):
    """One of the hosts candidates are tried on at the same time (`[[hosts]]` in the target file)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
    """Short name shown in summaries and used in branch and folder names."""
    host: Host = Field(default_factory=LocalHost)
    """The machine: this one, or one over SSH."""
    repo: Path
    """That host's own checkout of the engine, at the commit the session starts from."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment for this host's servers, over `launch.env` (e.g. `CUDA_VISIBLE_DEVICES = "1"`,
    so that the GPUs of one machine serve as several hosts)."""

    @field_validator("env")
    @classmethod
    def _no_literal_secrets(cls, env: dict[str, str]) -> dict[str, str]:
        """No secret written out in the target file."""
        return refuse_secrets(env, "export it in your shell and list its name under launch.pass_env instead")


class LaunchConfig(Model):
    """How to start the target's server in the foreground, like a user's run_server.sh."""

    argv: list[str]
    """Command and arguments, run in the repo; `{port}` and `{python}` are substituted."""
    port: int = Field(0, ge=0, le=65535)
    """TCP port for the server; 0 picks a free one at each launch."""
    base_url: str = "http://127.0.0.1:{port}"
    """Where perfloop (on the target's host) reaches the server; `{port}` is substituted. Set it
    when the server listens elsewhere, e.g. `http://10.0.0.5:{port}` for a server bound to one
    interface."""
    health_path: str = "/health"
    """HTTP path that answers 200 once the server can serve."""
    startup_timeout_s: float = Field(180.0, gt=0)
    """Seconds to wait for health before the launch counts as hung."""
    stop_grace_s: float = Field(10.0, gt=0)
    """Seconds between SIGTERM and SIGKILL of the server's process group."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for the server (no secrets: see pass_env)."""
    check_listener: bool = True
    """Whether a launch counts only once the health answer provably comes from the started server
    (its process group holds the port's listening socket, read from /proc). Turn off for a server
    whose listener lives elsewhere, e.g. a container's published port."""
    pass_env: list[str] = Field(default_factory=list)
    """Names of variables passed from perfloop's environment at launch (API keys, tokens): their
    values are read when the server starts and are never stored in the session."""
    ready_completion: bool = False
    """Whether a launch counts as ready only once a one-token `/v1/completions` request (no model
    named) also answers 200 after health: vLLM's `/health` answers 200 before a request is served
    (and before a bad model kills its engine). On by default where the engine says so (vLLM)."""
    started_log: str | None = None
    """A regular expression the server's log matches once it listens (vLLM: uvicorn's
    `Application startup complete`): a port still refusing connections 15 s after it is a launch
    that never listens, stopped and retried on a fresh port. Set by default where the engine says so (vLLM)."""
    listen_retries: int = Field(2, ge=0)
    """Fresh-port launches after one that never listened (`started_log`) or that exited saying its
    port is in use (bound by another process since perfloop chose it); with `port = 0` only."""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        """An http(s) URL with a host and no path (paths such as /health are appended)."""
        parts = urlsplit(url.replace("{port}", "1"))
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(f"{url!r} is not a server base URL; write it like http://127.0.0.1:{{port}}")
        return url.rstrip("/")

    @field_validator("env")
    @classmethod
    def _no_literal_secrets(cls, env: dict[str, str]) -> dict[str, str]:
        """Refuse secret-looking variables written into the config."""
        return refuse_secrets(env, "export it in your shell and list its name under launch.pass_env instead")


class BenchServingConfig(Model):
    """Measuring with the engine's own serving benchmark on the host: SGLang's `python -m
    sglang.bench_serving`, or for `kind = "vllm"` targets `vllm bench serve`."""

    use: Literal["auto", "always", "never", "both"] = "auto"
    """`auto`: for `kind = "sglang"` targets, when the target's python has sglang's benchmark
    module (else perfloop's client; vLLM's is asked for with `always` or `both`: each of its runs
    imports vllm, ~20 s on a CPU host); `always`: required, for any target; `never`: perfloop's client;
    `both` (required like `always`): perfloop's client measures what the rule judges, then on the
    same launch bench_serving measures the same workload (its own warm-up, windows and levels),
    recorded beside (`Measurement.beside`) and shown next to the client's figures, never judged."""
    backend: Literal["sglang", "sglang-oai", "sglang-oai-chat"] = "sglang"
    """bench_serving `--backend`: SGLang's native `/generate`, or its OpenAI-compatible endpoints."""
    vllm_backend: Literal["openai", "openai-chat", "vllm"] = "openai"
    """`vllm bench serve --backend` (vllm targets): `/v1/completions`, `/v1/chat/completions`."""
    python: str = "{python}"
    """Interpreter on the host to run the benchmark with; `{python}` is the target's own."""
    tokenizer: str | None = None
    """bench_serving `--tokenizer`: a path on the host (`{repo}` is substituted) or a model id;
    unset, bench_serving uses the model name (a served name that is no path needs it)."""
    input_len: int = Field(128, ge=1)
    """Prompt length in tokens of its `random-ids` (vLLM: `random`) dataset (fixed seed: the same
    prompts each run)."""
    seed: int = 1
    """bench_serving `--seed`, fixed so that baseline and candidate get the same prompts."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for the benchmark, e.g. `HF_HUB_OFFLINE = "1"` (no secrets: it
    gets perfloop's environment minus secret-looking ones, as the server does); `vllm bench serve`
    substitutes `{repo}` in their values (`PYTHONPATH = "{repo}"`: the checkout's vllm)."""
    pass_env: list[str] = Field(default_factory=list)
    """Names of secret variables passed to the benchmark from perfloop's environment (e.g. HF_TOKEN
    for a gated tokenizer): it imports the patched checkout, so none is passed unless named."""

    @field_validator("env")
    @classmethod
    def _no_literal_secrets(cls, env: dict[str, str]) -> dict[str, str]:
        """Refuse secret-looking variables written into the config (they would be recorded)."""
        return refuse_secrets(
            env,
            "set it in the host's environment, where bench_serving inherits "
            "it, not in measure.bench_serving.env",
        )


class MeasureConfig(Model):
    """The fixed workload used for TTFT/TPOT and for the output-equality gate.

    perfloop's client sends `prompts`; with bench_serving, each run sends `len(prompts)` prompts of
    its seeded `random-ids` dataset instead, `repeats` runs, `max_tokens` output tokens each."""

    prompts: list[str] = Field(min_length=1)
    """Fixed prompts, sent with temperature 0."""
    max_tokens: int = Field(24, ge=2)
    """Tokens generated per request (at least 2, so TPOT is defined)."""
    repeats: int = Field(3, ge=1)
    """How many times each prompt is sent per look (see `[decide] looks`): the reference arm gets
    `repeats x looks` requests per prompt up front, a candidate `repeats` more per look on the same
    launch while the rule is undecided."""
    warmup_requests: int = Field(1, ge=0)
    """Requests sent and discarded before measuring."""
    request_timeout_s: float = Field(300.0, gt=0)
    """Per-request timeout."""
    bench_serving: BenchServingConfig = Field(default_factory=BenchServingConfig)
    """When and how to measure with `sglang.bench_serving` instead of perfloop's client."""


class ProfileConfig(Model):
    """How a profile is taken."""

    method: Literal["patch", "api"] = "patch"
    """`patch`: torch.profiler instrumentation in ModelRunner.forward_decode; `api`: /start_profile."""
    model_runner_path: str = "mla_server/model_runner.py"
    """Repo-relative file holding the decode method to instrument (patch method). For `kind =
    "sglang"` the site is found from the checkout's release (see tools/sglang/layout.py)."""
    hook_class: str = "ModelRunner"
    """Class whose decode method is instrumented."""
    hook_method: str = "forward_decode"
    """Method called once per decode step."""
    warmup_steps: int = Field(3, ge=0)
    """Decode steps run under the profiler but discarded."""
    active_steps: int = Field(5, ge=1)
    """Decode steps recorded in the trace."""
    prompt: str = "Profile this decode step, please."
    """Prompt of the profiling request."""
    timeout_s: float = Field(300.0, gt=0)
    """Seconds to wait for the trace to be written."""


TARGET_KINDS = ("mla_server", "sglang", "vllm")
"""The engines perfloop ships (tools/engines/registry.py loads them); others join by entry point."""
ENGINE_GROUP = "perfloop.engines"
"""The entry-point group in which an installed package registers an engine under its target kind."""


def known_kinds() -> tuple[str, ...]:
    """The built-in engines and every one registered by entry point (metadata read, nothing imported)."""
    return tuple(dict.fromkeys([*TARGET_KINDS, *(ep.name for ep in entry_points(group=ENGINE_GROUP))]))


class TargetConfig(Model):
    """A target, as read from a TOML file (see examples/targets/mla_server.toml)."""

    name: str
    """Human-readable name."""
    kind: str = "mla_server"
    """Target kind: the engine (tools/engines/registry.py) and the playbook patch variant."""
    repo: Path
    """Path of the engine checkout (a git repository) on the host."""
    host: Host = Field(default_factory=LocalHost)
    """Where the target runs."""
    model: str = "default"
    """Model name sent in completion requests."""
    tp_size: int = Field(1, ge=1)
    """Tensor-parallel ranks: an `api` profile waits for one trace per rank and merges them."""
    launch: LaunchConfig
    """How to start the server."""
    measure: MeasureConfig
    """The measurement workload."""
    profile: ProfileConfig = Field(default_factory=ProfileConfig)
    """How profiles are taken."""
    max_patch_bytes: int = Field(1024 * 1024, ge=1)
    """Largest patch the patch gate accepts (playbook, edited or model-written), in bytes."""
    proposer: ProposerConfig = Field(default_factory=ProposerConfig)
    """Who writes patches: playbooks, a model, or both (`[proposer]`)."""
    correctness: CorrectnessConfig = Field(default_factory=CorrectnessConfig)
    """The output gate's correctness set (beyond the timing prompts)."""
    decide: DecisionConfig = Field(default_factory=DecisionConfig)
    """How a candidate is judged: minimum gain, confidence, looks, launch-noise default."""
    hosts: list[TrialHost] = Field(default_factory=list)
    """Hosts on which several candidates of one iteration are tried at the same time, each against
    its own baseline (`[[hosts]]`); the best verified one is then applied here. Empty: one by one."""
    search: SearchConfig | None = None
    """Launch options to search (`[search]`, `--proposer search`); None: none searched."""
    workload: WorkloadConfig | None = None
    """Requests at concurrency, measured in windows (`[workload]`); None: the `[measure]` prompts
    one at a time, each request a unit of evidence."""

    @model_validator(mode="after")
    def _numerics_need_tolerance(self) -> "TargetConfig":
        """A knob that changes numerics is searched only where outputs may move (not `exact`)."""
        bad = [k.name for k in self.search.knobs if k.numerics] if self.search else []
        if bad and self.correctness.policy == "exact":
            raise ValueError(
                f'[search] knob {bad[0]} changes numerics: it needs [correctness] policy = "numerics" '
                '(the default) or "tolerance", not "exact"'
            )
        return self

    @model_validator(mode="after")
    def _reference_host(self) -> "TargetConfig":
        """Cross-host arms name one of the `[[hosts]]` as the reference's host."""
        name, names = self.decide.reference_host, [h.name for h in self.hosts]
        if name is None and self.decide.arms == "cross-host":
            known = f" (one of: {', '.join(names)})" if names else " and a [[hosts]] entry of that name"
            raise ValueError(f'[decide] arms = "cross-host" needs reference_host = "NAME"{known}')
        if name is not None and name not in names:
            known = ", ".join(names) if names else "none listed"
            raise ValueError(f"[decide] reference_host = {name!r} is not a [[hosts]] name ({known})")
        there = next((h for h in self.hosts if h.name == name), None)
        if there is not None and there.host == self.host and there.repo == self.repo:
            raise ValueError(
                f"[decide] reference_host = {name!r} is the target's own checkout: give that [[hosts]] "
                "entry its own clone of the repo"
            )
        return self

    @field_validator("hosts")
    @classmethod
    def _unique_names(cls, hosts: list[TrialHost]) -> list[TrialHost]:
        """Each host's name once."""
        names = [h.name for h in hosts]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"[[hosts]] names must differ; {', '.join(dup)} appears more than once")
        return hosts

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        """A known engine (a typo would run the launch, baseline and profile for nothing); the
        installed metadata is read only for a kind that is not a built-in (30 ms a state)."""
        if kind not in TARGET_KINDS and kind not in (known := known_kinds()):
            msg = f'an engine of your own registers under the entry-point group "{ENGINE_GROUP}"'
            raise ValueError(f"kind {kind!r} is not one perfloop knows ({', '.join(known)}); {msg}")
        return kind
