"""The engine contract suite (tests/engines/suite.py) run against every engine perfloop ships:
statically for each kind on a real checkout of its source (the demo's tree, an SGLang release's
files from its cached wheel, the vLLM source repo `make vllm` builds), and live against the demo
server's tiny preset. vLLM's live run is in tests/vllm/test_launch.py, on that group's one server."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent.cli.target import load_target
from tests.engines.suite import check_live, check_static
from tests.target.conftest import SMALL, TARGET, Server, free_port, launch, wait_healthy
from tools.engines.registry import BUILTINS, engine
from tools.errors import ConfigError
from tools.workspace.git import GitWorkspace

DEMO_TOML = TARGET.parent / "mla_server.toml"


def checkout(kind: str, tmp_path: Path) -> Path:
    """A git repo of the engine's source, as a target's `repo` is."""
    if kind == "sglang":
        from tests.sglang.conftest import unpack

        with unpack("0.5.23", tmp_path) as ws:
            return ws.root
    if kind == "vllm":
        from tests.vllm.conftest import TEMPLATE, _need_venv
        from tools.vllm.checkout import clone

        _need_venv()
        return clone(TEMPLATE, tmp_path / "vllm")
    src = tmp_path / "src"
    shutil.copytree(TARGET, src, ignore=shutil.ignore_patterns("__pycache__"))
    with GitWorkspace.create_from_tree(src, tmp_path / "repo") as ws:
        return ws.root


@pytest.mark.parametrize("kind", sorted(BUILTINS))
def test_every_engine_meets_the_contract_statically(kind: str, tmp_path: Path) -> None:
    profile = load_target(DEMO_TOML).profile  # where the demo's target file puts the profiler
    site = (profile.model_runner_path, profile.hook_class, profile.hook_method)
    check_static(kind, checkout(kind, tmp_path), site if kind == "mla_server" else None)


def test_the_demo_server_meets_the_contract_live(tmp_path: Path) -> None:
    port = free_port()
    server = Server(launch(TARGET, ["--port", str(port), *SMALL], tmp_path / "log"), port, tmp_path / "log")
    try:
        wait_healthy(server)
        check_live("mla_server", server.url, "mla-demo")
    finally:
        server.stop()


def test_an_unknown_engine_is_one_line_naming_the_known_ones_and_how_to_register(tmp_path: Path) -> None:
    text = DEMO_TOML.read_text().replace('kind = "mla_server"', 'kind = "trtllm"')
    (tmp_path / "t.toml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_target(tmp_path / "t.toml")
    line = str(err.value)
    assert "\n" not in line and "kind `trtllm` is not one perfloop knows (mla_server, sglang, vllm" in line
    assert 'entry-point group "perfloop.engines"' in line, line
    with pytest.raises(ConfigError, match=r"no engine named 'trtllm' \(known: mla_server, sglang, vllm"):
        engine("trtllm")


def test_an_engine_that_does_not_load_is_one_line_naming_what_it_names(tmp_path: Path, monkeypatch) -> None:
    dist = tmp_path / "broken_engine-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-engine\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[perfloop.engines]\nbroken = no_such_module_here:Engine\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as err:
        engine("broken")
    assert str(err.value).startswith(
        "engine 'broken' names no_such_module_here:Engine, which does not load: "
    )
