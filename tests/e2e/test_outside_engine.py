"""An engine from outside this repository: a package written here into a folder on PYTHONPATH,
registered by its own `.dist-info/entry_points.txt` in the `perfloop.engines` group (what `pip
install` of a package declaring that entry point leaves), runs a whole session of the real CLI,
baseline, a playbook's candidate and its decision, with no change to perfloop. The engine wraps
the demo server (its launch.sh) and says how its readiness is judged (a real completion), which
the session's launches then use; the playbook carries a patch for its kind. Without the package
on the path the same target is one line naming the known engines and how to register one."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from .conftest import BUILTIN_PLAYBOOK, assert_clean, kept_unless_drifted, last_json, perfloop, write_target

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

ENGINE = '''"""tinyserve: the demo server under an engine name of its own."""

from state.engines.sglang import HookSite
from tools.engines.contract import Engine


class TinyServe(Engine):
    name = "tinyserve"
    changeable_flags = ("--max-running-requests", "--threads")
    batch_flag = "--max-running-requests"
    launch_defaults = {"ready_completion": True}
    context_fields = ("/get_server_info context_len", "/v1/models max_model_len")

    def hook_site(self, repo, env):
        """Found from the tree: the class whose method decodes one step."""
        (runner,) = sorted(repo.glob("*/model_runner.py"))
        return HookSite(relpath=str(runner.relative_to(repo)), class_name="ModelRunner", method="forward_decode")
'''


PLAYBOOK = "tinyserve-pool-cast"


def install_engine(site: Path) -> None:
    """The package and its distribution metadata, as an installer would leave them."""
    (site / "tinyserve_engine").mkdir(parents=True)
    (site / "tinyserve_engine" / "__init__.py").write_text(ENGINE)
    dist = site / "tinyserve_engine-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyserve-engine\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[perfloop.engines]\ntinyserve = tinyserve_engine:TinyServe\n")


def playbook_for(books: Path, kind: str) -> None:
    """The built-in pool-cast playbook as a user's own (`PLAYBOOK`), the demo's patch offered for
    `kind` too."""
    folder = books / PLAYBOOK
    shutil.copytree(BUILTIN_PLAYBOOK.parent, folder)
    text = (
        (folder / "playbook.toml").read_text().replace('id = "kv-cache-full-pool-cast"', f'id = "{PLAYBOOK}"')
    )
    line = 'mla_server = "patches/mla_server.diff"'
    assert line in text and PLAYBOOK in text
    (folder / "playbook.toml").write_text(text.replace(line, f'{line}\n{kind} = "patches/mla_server.diff"'))


def test_an_engine_registered_from_outside_runs_a_whole_session(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    site, books = tmp_path / "site", tmp_path / "books"
    install_engine(site)
    playbook_for(books, "tinyserve")
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    text = target.read_text().replace('kind = "mla_server"', 'kind = "tinyserve"')
    # the engine finds where the dormant profiler goes (`hook_site`), not the target file: a wrong
    # path here is replaced by what the engine finds in the checkout
    target.write_text(text.replace("[profile]\n", '[profile]\nmodel_runner_path = "no/such/runner.py"\n'))
    run = ["run", "--approve", "auto", str(target), "--json", "--playbooks", str(books)]
    run += ["--no-builtin-playbooks", "--max-iterations", "1"]

    refused = perfloop(home, *run)  # not installed: one line, nothing started
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "kind `tinyserve` is not one perfloop knows (mla_server, sglang, vllm)" in refused.stderr
    assert 'entry-point group "perfloop.engines"' in refused.stderr

    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    proc = perfloop(home, *run, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = last_json(proc)
    shown = last_json(perfloop(home, "show", s["session"], "--json", env=env))
    decided = [d for d in shown["decisions"] if d["playbook"] == PLAYBOOK]
    assert len(decided) == 1, shown["decisions"]
    accepted = kept_unless_drifted(decided[0]["verdict"] == "accepted", decided[0]["reason"])
    assert s["accepted"] == ([PLAYBOOK] if accepted else []), s
    assert_clean(repo, s)
    # every launch was judged ready as the engine says (a real completion; the demo kind does not ask)
    out = tmp_path / "session.json"
    assert perfloop(home, "export", s["session"], "-o", str(out), env=env).returncode == 0
    launches = [
        c["input"]["launch"]
        for c in json.loads(out.read_text())["tool_calls"]
        if c["name"] == "server.launch"
    ]
    assert len(launches) >= 2 and all(x["ready_completion"] is True for x in launches), launches
    (found,) = [
        c["output"] for c in json.loads(out.read_text())["tool_calls"] if c["name"] == "repo.engine_site"
    ]
    assert found["hook"]["relpath"] == "mla_server/model_runner.py", found
    replayed = perfloop(home, "replay", s["session"], env=env)
    assert replayed.returncode == 0, replayed.stderr[-2000:]
