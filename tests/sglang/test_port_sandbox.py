"""The equivalence harness runs a model's port in a confined child, not in perfloop (issue 56;
tools/sglang/sandbox.py). On the real 0.5.9 backend, a port whose `DecodeMetadata` class body (run
when the harness compiles it) reads `OPENAI_API_KEY`, writes a file outside its sandbox folder, or
runs a shell command: it sees no key, writes nothing, runs nothing, and scores as a port that
raised. Landlock, where the kernel has it, holds without the audit hook too: a confined process
writes nothing outside its folder. A port carrying a
hidden character is refused by the patch gate before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from state.engines.sglang import EquivalenceArgs
from tests.sglang.conftest import unpack
from tools.sglang.porting import equivalence

BACKEND = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
KEY = "sk-port-" + os.urandom(8).hex()


def port(repo: Path, body: str) -> str:
    """A diff adding `body` (class-body lines) under `class DecodeMetadata:`."""
    path = repo / BACKEND
    text = path.read_text()
    assert "class DecodeMetadata:\n" in text
    path.write_text(text.replace("class DecodeMetadata:\n", "class DecodeMetadata:\n" + body, 1))
    diff = subprocess.run(["git", "-C", str(repo), "diff"], capture_output=True, text=True, check=True).stdout
    subprocess.run(["git", "-C", str(repo), "checkout", "--", BACKEND], check=True)
    return diff


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    ws = unpack("0.5.9", tmp_path_factory.mktemp("sglang-sandbox"))
    root = ws.root
    ws.close()
    return root


def test_a_class_body_reads_no_key_writes_nothing_outside_and_runs_nothing(
    repo: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    outside, ran = tmp_path / "outside.txt", tmp_path / "ran"
    cases = {
        "key": '    import os as _os\n    raise RuntimeError("key=" + _os.environ.get("OPENAI_API_KEY", "absent"))\n',
        "parent's key": (
            "    import os as _os\n"
            "    _env = open(f'/proc/{_os.getppid()}/environ', 'rb').read()\n"
            '    raise RuntimeError("parent=" + ("leaked" if b"OPENAI_API_KEY" in _env else "clean"))\n'
        ),
        "write": f'    open("{outside}", "w").write("planted")\n',
        "shell": f'    __import__("os").system("touch {ran}")\n',
        "subprocess": f'    __import__("subprocess").run(["touch", "{ran}"])\n',
    }
    lines = {}
    for name, body in cases.items():
        result = equivalence(EquivalenceArgs(repo=repo, diff=port(repo, body), backend=BACKEND))
        assert (result.applied, result.identical) == (True, False), (name, result)
        assert KEY not in result.line
        lines[name] = result.line
    assert lines["key"] == "decode raised RuntimeError: key=absent", lines
    assert "parent=leaked" not in lines["parent's key"] and "PermissionError" in lines["parent's key"], lines
    assert lines["write"].startswith("decode raised PermissionError"), lines
    assert "PermissionError" in lines["shell"] and "PermissionError" in lines["subprocess"], lines
    assert not outside.exists() and not ran.exists()
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""  # the checkout untouched


def test_a_port_with_a_hidden_character_is_refused_by_the_patch_gate(repo: Path) -> None:
    diff = port(repo, "    x = 1  # \u202e\n")
    result = equivalence(EquivalenceArgs(repo=repo, diff=diff, backend=BACKEND))
    assert not result.applied and result.line.startswith("PatchError: patch refused:"), result
    assert "U+202E" in result.line


def test_landlock_alone_keeps_writes_in_the_folder(tmp_path: Path) -> None:
    """Without the audit hook: the kernel's confinement (this kernel has Landlock; a kernel without
    it fails this test rather than skipping it). Reading the parent's environment is left to the
    audit hook (above): Landlock's ptrace scoping does not stop root, which these tests run as."""
    box, outside = tmp_path / "box", tmp_path / "outside.txt"
    box.mkdir()
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from tools.sglang.sandbox import landlock\n"
        f"assert landlock(Path({str(box)!r}))\n"
        f"Path({str(box / 'inside.txt')!r}).write_text('ok')\n"
        "for what, act in (('write', lambda: open(%r, 'w')), ('mkdir', lambda: os.mkdir(%r))):\n"
        "    try:\n"
        "        act()\n"
        "        print(what, 'allowed')\n"
        "    except PermissionError:\n"
        "        print(what, 'refused')\n"
    ) % (str(outside), str(tmp_path / "made"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["write refused", "mkdir refused"], done.stdout
    assert (
        (box / "inside.txt").read_text() == "ok" and not outside.exists() and not (tmp_path / "made").exists()
    )
