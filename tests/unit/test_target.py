"""agent/cli/target.py: loading a target TOML (editing a launch command's flags: test_launch_options.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli.target import load_target, with_proposer
from tools.errors import ConfigError

DEMO_TOML = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server.toml"


def test_target_config_resolves_repo_and_rejects_bad_fields(tmp_path: Path) -> None:
    target = load_target(DEMO_TOML, repo="rel/repo")
    assert target.repo == (DEMO_TOML.parent / "rel" / "repo").resolve()
    assert target.kind == "mla_server" and "{port}" in target.launch.argv
    bad = tmp_path / "t.toml"
    bad.write_text(DEMO_TOML.read_text().replace("max_tokens = 16", "max_tokens = 1"))
    with pytest.raises(ConfigError, match=r"field `measure.max_tokens`"):
        load_target(bad)
    bad.write_text(DEMO_TOML.read_text() + "\ntypo_field = 1\n")
    with pytest.raises(ConfigError, match="typo_field"):
        load_target(bad)


def test_proposer_options_override_the_target_file(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    target = load_target(DEMO_TOML)
    assert target.proposer.mode == "auto" and target.proposer.model is None
    t = with_proposer(
        target, mode="llm", model="m", base_url=None, max_steps=4, max_tokens=None, max_seconds=None
    )
    assert (t.proposer.mode, t.proposer.model, t.proposer.max_steps) == ("llm", "m", 4)
    assert t.proposer.base_url == "http://127.0.0.1:9/v1" and t.proposer.max_tokens == 200_000
    with pytest.raises(ConfigError, match="--proposer llm needs a model"):
        with_proposer(target, mode="llm")
    with pytest.raises(ConfigError, match="must be one of playbook, llm, auto"):
        with_proposer(target, mode="gpt")
    with pytest.raises(ConfigError, match="without credentials"):
        with_proposer(target, base_url="http://user:pw@host/v1")


def test_proposer_section_in_a_target_file(tmp_path: Path) -> None:
    text = DEMO_TOML.read_text() + '\n[proposer]\nmode = "llm"\nmodel = "qwen"\nmax_steps = 5\n'
    (tmp_path / "t.toml").write_text(text)
    cfg = load_target(tmp_path / "t.toml").proposer
    assert (cfg.mode, cfg.model, cfg.max_steps, cfg.api_key_env) == ("llm", "qwen", 5, "OPENAI_API_KEY")
    (tmp_path / "t.toml").write_text(text + "api_key = 'sk-x'\n")
    with pytest.raises(
        ConfigError, match=r"unknown key `api_key` in \[proposer\]; did you mean `api_key_env`"
    ) as e:
        load_target(tmp_path / "t.toml")
    assert "sk-x" not in str(e.value)  # the key's value (a secret) is never echoed
