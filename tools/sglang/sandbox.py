"""The equivalence harness's model-written code runs in a child, never in perfloop (issues 56, 62).

`check` (the parent's side) runs `python -m tools.sglang.sandbox DIR` in a folder of its own with
the probe's minimal environment (tools/llm/probe.py `probe_env`: no key, token, password, store
URL or URL password; HOME and TMPDIR the folder), in its own process group, under a time limit
past which the whole group is killed, inside bubblewrap's namespaces (tools/sglang/confine.py: it
sees no file but the interpreter, its packages, perfloop's and the system's libraries and DIR, no
network, no process outside). Where bubblewrap or namespaces are missing the port's code is not
run (a `PortRaised` naming what is missing) unless `PERFLOOP_PORT_SANDBOX=off`. The child
(`main`) imports torch and the harness first, then confines itself before any port's code is
compiled (a seccomp filter on every thread, confine.py: no exec, no new process, no socket but
AF_UNIX, no signal but to itself), and:
- Landlock (Linux 5.13+): no file written, made, renamed or removed outside DIR (and /dev/null),
  no TCP connection (ABI 4+), and, for a user without CAP_SYS_PTRACE, no ptrace of a process
  outside it (not for root: the audit hook refuses `/proc/PID/environ` then);
- a Python audit hook (where the kernel has no Landlock, the only guard): files opened for
  writing outside DIR, `/proc/*/environ` of another process, new processes (`os.system`,
  `subprocess`, `exec`, `fork`) and sockets refused.
Its answer is one JSON line on stdout. A port can still lie about its own score from inside the
child (it runs there): the harness scores models, it is not a gate; what is applied to a tree
goes through the patch gate and a human's approval (docs/SECURITY.md)."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.llm.probe import probe_env
from tools.sglang.confine import MECHANISM, UNCONFINED_ENV, seccomp, unavailable, unconfined, wrapped

_missing = functools.cache(unavailable)

TIME_LIMIT_S = 300.0
"""Wall-clock seconds a port's check may take (both decode paths on every case, on CPU)."""
_WRITES = (
    (1 << 1)
    | (1 << 4)
    | (1 << 5)
    | (1 << 6)
    | (1 << 7)
    | (1 << 8)
    | (1 << 9)
    | (1 << 10)
    | (1 << 11)
    | (1 << 12)
)
"""Landlock's file-system rights that change something: write a file, remove a folder or file,
make a char device, folder, file, socket, fifo, block device or symlink."""


class PortRaised(RuntimeError):
    """The child's answer was an error: `Type: message` of what the port's code raised (or why the
    child ended: past its time limit, no answer)."""


def check(before: str, after: str, filename: str, limit_s: float = TIME_LIMIT_S) -> tuple[bool, bool, str]:
    """`tools.sglang.equivalence.check` run in a confined child; its error raised as `PortRaised`."""
    with tempfile.TemporaryDirectory(prefix="perfloop-port-run-") as tmp:
        env = {**probe_env(dict(os.environ), []), "HOME": tmp, "TMPDIR": tmp}
        root = str(Path(__file__).resolve().parents[2])  # perfloop's packages, for `-m`
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        argv = [sys.executable, "-m", "tools.sglang.sandbox", tmp]
        if unconfined():
            argv.append("--unconfined")
        elif (missing := _missing()) is not None:
            raise PortRaised(
                f"SandboxUnavailable: {missing}, so the port's code was not run (it runs only under "
                f"{MECHANISM}; {UNCONFINED_ENV}=off runs it under Landlock and an audit hook only)"
            )
        else:
            argv = wrapped(argv, Path(tmp), Path(root))
        proc = subprocess.Popen(
            argv,
            cwd=tmp,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(json.dumps([before, after, filename]), timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise PortRaised(
                f"TimeoutError: the check ran past its {limit_s:.0f} s limit and was stopped"
            ) from None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    answer = _last_json(out)
    if answer is None:
        tail = (err.strip().splitlines() or ["no answer"])[-1]
        raise PortRaised(f"ChildProcessError: the check's process ended with {proc.returncode}: {tail}")
    if "error" in answer:
        raise PortRaised(str(answer["error"]))
    return bool(answer["identical"]), bool(answer["active"]), str(answer["line"])


def _last_json(out: str) -> dict[str, Any] | None:
    for line in reversed(out.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def landlock(folder: Path) -> bool:
    """Confine this process with Landlock (writes only under `folder`, no TCP): whether the kernel did."""
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # the ABI version
    if abi < 1:
        return False
    fs = _WRITES | ((1 << 13) if abi >= 2 else 0) | ((1 << 14) if abi >= 3 else 0)
    net = 0b11 if abi >= 4 else 0  # bind and connect TCP

    class Ruleset(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64)]

    class Beneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]

    attr = Ruleset(fs, net)
    size = ctypes.sizeof(attr) if abi >= 4 else 8
    ruleset = libc.syscall(444, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    for path, allowed in ((folder, fs), (Path("/dev/null"), 1 << 1)):
        fd = os.open(path, os.O_PATH)
        rule = Beneath(allowed, fd)
        libc.syscall(445, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0))
        os.close(fd)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    done = libc.syscall(446, ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0
    os.close(ruleset)
    return done


def audit(folder: Path) -> None:
    """Refuse, from now on in this process, what the port's code has no need of (a Python audit hook)."""
    inside, me = str(folder.resolve()), f"/proc/{os.getpid()}/"
    blocked: tuple[str, ...] = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty")
    blocked += ("subprocess.Popen", "pty.spawn", "socket.connect", "socket.bind", "ctypes.dlopen")
    changes: tuple[str, ...] = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link")
    changes += ("os.truncate", "os.chmod", "os.chown", "shutil.rmtree", "shutil.copyfile", "shutil.move")

    def outside(path: object) -> bool:
        if isinstance(path, int):
            return False
        where = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
        return not (where == inside or where.startswith(inside + os.sep) or where == "/dev/null")

    def hook(event: str, args: tuple) -> None:
        if event.startswith(blocked):
            raise PermissionError(f"the equivalence harness's sandbox refuses {event}")
        if event == "open" and args and not isinstance(args[0], int):
            path, mode, flags = args[0], args[1] or "", args[2] or 0
            writes = any(c in str(mode) for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            name = os.path.realpath(os.fsdecode(path))
            if writes and outside(path):
                raise PermissionError(f"the equivalence harness's sandbox refuses writing {name}")
            if name.startswith("/proc/") and name.endswith(("environ", "/mem")) and not name.startswith(me):
                raise PermissionError(f"the equivalence harness's sandbox refuses reading {name}")
        if event.startswith(changes) and any(outside(a) for a in args[:2] if isinstance(a, (str, bytes))):
            raise PermissionError(f"the equivalence harness's sandbox refuses {event} outside its folder")

    sys.addaudithook(hook)


def main() -> None:
    """The child: read [before, after, filename] from stdin, confine, check, answer one JSON line."""
    folder = Path(sys.argv[1]).resolve()
    before, after, filename = json.loads(sys.stdin.read())
    out = os.fdopen(os.dup(1), "w")
    from tools.sglang import equivalence  # torch: imported before the confinement

    landlock(folder)
    try:
        if "--unconfined" not in sys.argv[2:]:
            seccomp()  # the kernel's filter, on every thread (tools/sglang/confine.py)
        audit(folder)
        identical, active, line = equivalence.check(before, after, filename)
        answer: dict[str, Any] = {"identical": identical, "active": active, "line": line}
    except BaseException as exc:  # the port's own error (or a refusal): the port is wrong
        answer = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500]}
    out.write(json.dumps(answer) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
