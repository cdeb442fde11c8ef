"""agent/cli/target.py: loading a target TOML (editing a launch command's flags: test_launch_options.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli.target import load_target
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
