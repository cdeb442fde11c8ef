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


def test_the_kernel_confines_a_class_body_that_shells_out_sends_udp_reads_the_key_and_signals(
    repo: Path, tmp_path: Path, monkeypatch
) -> None:
    """Issue 62: what the audit hook did not see. `ctypes.pythonapi.system` (libc's `system`, no
    dlopen), a UDP datagram carrying the user's signing key, a read of
    `$PERFLOOP_HOME/signing.key`, and SIGTERM to a process outside the child: nothing is done
    (no file made, no datagram received, the key unread, the process alive); what refused each
    is the kernel's (bubblewrap's namespaces, the seccomp filter: EPERM / ENOENT), named."""
    import signal
    import socket

    from tools.sglang import sandbox

    home, ran = tmp_path / "home", tmp_path / "ran"
    home.mkdir(mode=0o700)
    (home / "signing.key").write_text("ab" * 32)
    monkeypatch.setenv("PERFLOOP_HOME", str(home))
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port_no = listener.getsockname()[1]
    victim = subprocess.Popen(["sleep", "300"])
    cases = {
        "system": f"    import ctypes as _c\n    raise RuntimeError(f\"system={{_c.pythonapi.system(b'touch {ran}')}}\")\n",
        "udp": (
            "    import socket as _s\n"
            "    try:\n"
            f"        _s.socket(_s.AF_INET, _s.SOCK_DGRAM).sendto(b'k', ('127.0.0.1', {port_no}))\n"
            "    except OSError as _e:\n"
            '        raise RuntimeError(f"udp={_e.errno}")\n'
            '    raise RuntimeError("udp=sent")\n'
        ),
        "key": (
            "    try:\n"
            f"        _k = open({str(home / 'signing.key')!r}).read()\n"
            "    except OSError as _e:\n"
            '        raise RuntimeError(f"key={_e.errno}")\n'
            '    raise RuntimeError("key=read " + _k[:4])\n'
        ),
        "signal": (
            "    import os as _o\n"
            "    try:\n"
            f"        _o.kill({victim.pid}, 15)\n"
            "    except OSError as _e:\n"
            '        raise RuntimeError(f"kill={_e.errno}")\n'
            '    raise RuntimeError("kill=sent")\n'
        ),
    }
    try:
        assert sandbox._missing() is None, sandbox._missing()  # this machine's kernel confines it
        lines = {}
        for name, body in cases.items():
            result = equivalence(EquivalenceArgs(repo=repo, diff=port(repo, body), backend=BACKEND))
            assert (result.applied, result.identical) == (True, False), (name, result)
            lines[name] = result.line
        with pytest.raises(TimeoutError):
            listener.recvfrom(64)  # no datagram came
        assert victim.poll() is None  # still running
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        listener.close()
    # 32512: glibc's system() when posix_spawn could not make a process; 1 EPERM (seccomp), 2 ENOENT (not mounted)
    assert lines == {
        "system": "decode raised RuntimeError: system=32512",
        "udp": "decode raised RuntimeError: udp=1",
        "key": "decode raised RuntimeError: key=2",
        "signal": "decode raised RuntimeError: kill=1",
    }, lines
    assert not ran.exists()
    assert "bubblewrap" in sandbox.MECHANISM and "seccomp" in sandbox.MECHANISM


def test_without_bubblewrap_model_code_does_not_run_unless_the_user_says_so(
    repo: Path, tmp_path: Path, monkeypatch
) -> None:
    """A machine without `bwrap` (`shutil.which` finds none here): the port is not run, in one line
    naming what is missing and the switch; `PERFLOOP_PORT_SANDBOX=off` runs it (Landlock and the hook)."""
    import shutil

    from tools.sglang import sandbox

    which = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda name, *a, **k: None if name == "bwrap" else which(name, *a, **k)
    )
    sandbox._missing.cache_clear()
    try:
        diff = port(repo, "    x = 1\n")
        result = equivalence(EquivalenceArgs(repo=repo, diff=diff, backend=BACKEND))
        assert not result.identical and "SandboxUnavailable: bubblewrap (`bwrap`" in result.line, result
        assert "is not installed" in result.line and "PERFLOOP_PORT_SANDBOX=off" in result.line, result
        monkeypatch.setenv("PERFLOOP_PORT_SANDBOX", "off")
        result = equivalence(EquivalenceArgs(repo=repo, diff=diff, backend=BACKEND))
        assert result.applied and "SandboxUnavailable" not in result.line, result
    finally:
        sandbox._missing.cache_clear()
