"""The kernel's confinement of the equivalence harness's child (tools/sglang/sandbox.py; issue 62).

Two well-kept mechanisms, each checked before a port's code runs:
- bubblewrap (`bwrap`, Debian's `bubblewrap`, installed by `make system-deps`) starts the child in
  new user, PID, network, IPC, UTS and mount namespaces: it sees only the interpreter, its
  site-packages, perfloop's packages and the system's libraries (read-only), its own folder
  (writable), a fresh /dev and /proc; no network but its own loopback, no process outside its
  PID namespace to signal, nothing of $PERFLOOP_HOME (the signing key) or the user's files;
- a seccomp filter the child loads on all its threads (`seccomp(2)` with TSYNC) once torch and
  the harness are imported, before any port's code is compiled: no `execve`/`execveat`, no new
  process (`fork`, `vfork`, `clone` without CLONE_THREAD, `clone3`: glibc falls back to `clone`
  for threads), no socket but AF_UNIX, no `kill` but of itself, no `tkill`, `pidfd_send_signal`,
  `ptrace`, `process_vm_*`, `io_uring_setup`, `unshare`, `setns`, `mount`, `bpf`.
Where either is missing (no `bwrap`, a kernel or container that refuses namespaces, an
architecture the filter is not written for) the port's code is not run: `unavailable` names what
is missing; `PERFLOOP_PORT_SANDBOX=off` (the user's word) runs it with Landlock and the audit
hook only."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import shutil
import site
import struct
import subprocess
import sys
from pathlib import Path

UNCONFINED_ENV = "PERFLOOP_PORT_SANDBOX"
"""Set to `off` to run ports' code without bubblewrap and seccomp (where the kernel lacks them)."""
MECHANISM = (
    "bubblewrap (user, PID, network and mount namespaces) and seccomp (no exec, no new process, "
    "no socket but AF_UNIX, no signal but to itself)"
)
"""What confines the child, for messages and docs."""
_SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ld.so.cache", "/etc/alternatives")
_X86_64 = 0xC000003E
_DENY = {"execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "tkill": 200, "ptrace": 101}
_DENY |= {"pidfd_send_signal": 424, "process_vm_readv": 310, "process_vm_writev": 311, "io_uring_setup": 425}
_DENY |= {"unshare": 272, "setns": 308, "mount": 165, "bpf": 321, "pidfd_open": 434, "pidfd_getfd": 438}
_CLONE, _CLONE3, _SOCKET, _SOCKETPAIR, _KILL, _SECCOMP = 56, 435, 41, 53, 62, 317


def unconfined() -> bool:
    """Whether the user said to run ports' code without the kernel's confinement."""
    return os.environ.get(UNCONFINED_ENV, "").lower() == "off"


def unavailable() -> str | None:
    """What this machine lacks to confine the child (bubblewrap, namespaces, the seccomp filter's
    architecture), in one line, or None: checked by starting `bwrap ... true` once."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the seccomp filter is written for x86_64, not {platform.machine()}"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (`bwrap`, Debian package bubblewrap; `make system-deps`) is not installed"
    tried = subprocess.run(
        [bwrap, *_namespaces(), "--ro-bind", "/", "/", "true"], capture_output=True, text=True, timeout=30
    )
    if tried.returncode != 0:
        why = (tried.stderr.strip().splitlines() or [f"exit {tried.returncode}"])[-1]
        return f"bubblewrap cannot make namespaces here ({why})"
    return None


def _namespaces() -> list[str]:
    return ["--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]


def wrapped(argv: list[str], folder: Path, root: Path) -> list[str]:
    """`argv` run by bubblewrap: read-only the interpreter, its packages, `root` (perfloop's
    packages) and the system's libraries; `folder` writable; nothing else of the file system."""
    seen: list[str] = []
    reads = [sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), str(root), sys.executable]
    for p in [*_SYSTEM, *reads]:  # where they are: a link to one is bound with its folder (`root`)
        if os.path.exists(path := os.path.realpath(p)) and path not in seen:
            seen.append(path)
    binds = [arg for p in seen for arg in ("--ro-bind", p, p)]
    binds += [a for p in _SYSTEM if os.path.islink(p) for a in ("--symlink", os.readlink(p), p)]  # /lib64
    return [
        shutil.which("bwrap") or "bwrap",
        *_namespaces(),
        "--die-with-parent",
        "--new-session",
        *binds,
        "--bind",
        str(folder),
        str(folder),
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--chdir",
        str(folder),
        *argv,
    ]


def _program() -> list[tuple[int, int, int, int]]:
    """The seccomp BPF program (code, jt, jf, k), x86_64."""
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, deny, kill = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x80000000
    nosys = 0x00050000 | errno.ENOSYS
    me = os.getpid()
    prog: list[tuple[int, int, int, int]] = [
        (ld, 0, 0, 4),
        (jeq, 1, 0, _X86_64),
        (ret, 0, 0, kill),
        (ld, 0, 0, 0),
    ]
    for nr in _DENY.values():
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, deny)]
    prog += [(jeq, 0, 1, _CLONE3), (ret, 0, 0, nosys)]
    prog += [
        (jeq, 0, 4, _CLONE),
        (ld, 0, 0, 16),
        (jset, 0, 1, 0x00010000),
        (ret, 0, 0, allow),
        (ret, 0, 0, deny),
    ]
    for nr in (_SOCKET, _SOCKETPAIR):  # the domain: AF_UNIX (1) only
        prog += [(jeq, 0, 4, nr), (ld, 0, 0, 16), (jeq, 0, 1, 1), (ret, 0, 0, allow), (ret, 0, 0, deny)]
    prog += [(jeq, 0, 5, _KILL), (ld, 0, 0, 16), (jeq, 1, 0, me), (jeq, 0, 1, 0), (ret, 0, 0, allow)]
    prog += [(ret, 0, 0, deny), (ret, 0, 0, allow)]
    return prog


def seccomp() -> None:
    """Load the filter on every thread of this process (raises OSError naming why it could not)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        raise OSError(f"seccomp: no filter for {platform.machine()}")
    prog = _program()
    raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "seccomp: PR_SET_NO_NEW_PRIVS refused")
    fprog = Fprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    done = libc.syscall(_SECCOMP, ctypes.c_uint(1), ctypes.c_uint(1), ctypes.byref(fprog))  # FILTER, TSYNC
    if done != 0:
        raise OSError(
            ctypes.get_errno(), f"seccomp: the filter was refused ({os.strerror(ctypes.get_errno())})"
        )
