"""Reading target configs (TOML) and building the embedded demo's config."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.cli.targetcheck import example_for, said
from playbooks.flags import fixed_problem
from state.config.target import TargetConfig
from state.engines.ssh import SSHHostConfig
from state.measurement.numerics import read_task
from state.proposers.proposer import ProposerConfig, cleartext_refusal
from tools.engines.registry import engine, with_launch_defaults
from tools.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEMO_SOURCE = PROJECT_ROOT / "examples" / "targets" / "mla_server"
DEMO_CONFIG = PROJECT_ROOT / "examples" / "targets" / "mla_server.toml"


def load_target(path: Path, **overrides: Any) -> TargetConfig:
    """Parse and validate a target TOML; `repo` is resolved relative to the file."""
    try:
        text = path.read_text()
        data = tomllib.loads(text)
    except OSError as exc:
        raise ConfigError(f"cannot read target config {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    data.update(overrides)
    try:
        target = TargetConfig.model_validate(data)
    except ValidationError as exc:
        for each in exc.errors():  # an unknown key or section first: a missing one follows from it
            if (line := said(path, text, each)) is not None:
                raise ConfigError(line) from None
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise ConfigError(f"{path}: field `{where}`: {err['msg']} (see {example_for(text)})") from exc
    target = with_launch_defaults(target)
    target = with_task(path, target)
    knobs = [k.name for k in target.search.knobs if not k.env] if target.search else []
    for where, flag in [
        *(("[search] knob", k) for k in knobs),
        *(("[proposer] launch_flags", f) for f in target.proposer.launch_flags),
    ]:
        if problem := fixed_problem(flag):
            raise ConfigError(f"{path}: {where} {flag}: {problem}")
    if target.host.kind == "ssh":
        if not target.repo.is_absolute():
            raise ConfigError(f"{path}: `repo` must be an absolute path on the SSH host, not {target.repo}")
        return target
    repo = target.repo.expanduser()
    if not repo.is_absolute():
        repo = (path.parent / repo).resolve()
    return target.model_copy(update={"repo": repo})


def with_task(path: Path, target: TargetConfig) -> TargetConfig:
    """The `[correctness] task` file read into the target (its questions travel with the session);
    the numerics policy on an engine that returns no logprobs refused: both before any launch."""
    cfg = target.correctness
    if cfg.policy == "numerics" and not engine(target.kind).logprobs:
        raise ConfigError(
            f"{path}: engine {target.kind} returns no completion logprobs, which the numerics output gate "
            'needs: set [correctness] policy = "exact"'
        )
    if cfg.task is None:
        return target
    where = Path(cfg.task).expanduser()
    where = where if where.is_absolute() else (path.parent / where).resolve()
    try:
        items = read_task(where.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: [correctness] task {where}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: [correctness] task {where}: {exc}") from None
    return target.model_copy(
        update={"correctness": cfg.model_copy(update={"task": str(where), "task_items": items})}
    )


def with_host(
    target: TargetConfig, url: str | None, trust_new_host: bool = False, python: str | None = None
) -> TargetConfig:
    """Apply `--host URL` (an ssh:// URL replacing the config's host or its url),
    `--trust-new-host` and `--host-python` to a target."""
    host = target.host
    if url is not None:
        try:
            host = (
                host.model_copy(update={"url": SSHHostConfig(url=url).url})
                if isinstance(host, SSHHostConfig)
                else SSHHostConfig(url=url)
            )
        except ValidationError as exc:
            raise ConfigError(f"--host: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    for flag, field, value in (
        ("--trust-new-host", "trust_new_host", trust_new_host or None),
        ("--host-python", "python", python),
    ):
        if value is not None:
            if not isinstance(host, SSHHostConfig):
                raise ConfigError(f"{flag} needs an SSH host: pass --host ssh://... too")
            host = host.model_copy(update={field: value})
    return target.model_copy(update={"host": host})


def with_proposer(target: TargetConfig, **overrides: Any) -> TargetConfig:
    """Apply the command line's proposer options (None: keep the target's `[proposer]` value);
    the endpoint defaults to $OPENAI_BASE_URL, read now so that the session records it."""
    cfg = target.proposer
    given = {k: v for k, v in overrides.items() if v is not None}
    if "mode" in given and given["mode"] not in ("playbook", "llm", "auto", "search", "chain"):
        raise ConfigError(
            f"--proposer must be one of playbook, llm, auto, search, chain, not {given['mode']!r}"
        )
    if "approve" in given and given["approve"] not in ("manual", "auto"):
        raise ConfigError(f"--llm-approve must be manual or auto, not {given['approve']!r}")
    if cfg.base_url is None and "base_url" not in given and os.environ.get("OPENAI_BASE_URL"):
        given["base_url"] = os.environ["OPENAI_BASE_URL"]
    try:
        cfg = ProposerConfig.model_validate({**cfg.model_dump(), **given})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"proposer {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    if cfg.mode in ("llm", "auto", "chain") and cfg.model and os.environ.get(cfg.api_key_env):
        refused = cleartext_refusal(cfg.base_url, cfg.api_key_env)
        if refused is not None:
            raise ConfigError(refused)
    if cfg.mode == "llm" and not cfg.model:
        raise ConfigError("--proposer llm needs a model: pass --model NAME (or set model under [proposer])")
    if cfg.mode == "search" and target.search is None:
        raise ConfigError("--proposer search needs a [search] section with knobs in the target file")
    return target.model_copy(update={"proposer": cfg})
