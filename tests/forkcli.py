"""`perfloop` commands without the interpreter's start-up, for the kill-at-every-point sweep.

A fresh Python process imports the CLI and the loop once (the zygote); each command is then a
child it forks: its own process (own pid, own lease, own database connections, stdin from
/dev/null, stdout and stderr to files) running the console script's entry point, killed at a fault
point like a cold-started one. The interpreter start and imports (~2 s on 2 loaded cores) are paid
once instead of once per command. Nothing of the test process is inherited: the zygote is started
with `subprocess`, holds no connection, and each child ends with `os._exit` (no finalizer of the
zygote's runs twice).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ZYGOTE = r"""
import json, os, sys
import agent.cli, agent.sessions.runner  # the loop's imports, paid once
agent.cli.build()
print(json.dumps({"ready": True}), flush=True)
requests = os.fdopen(os.dup(0), "r")
for line in requests:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.environ.clear()
            os.environ.update(req["env"])
            null = os.open(os.devnull, os.O_RDONLY)
            out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            for fd, to in ((null, 0), (out, 1), (err, 2)):
                os.dup2(fd, to)
            sys.stdin = open(os.devnull)
            sys.argv = ["perfloop", *req["args"]]
            try:
                agent.cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class ForkedCli:
    """Runs `perfloop ARGS` as forked children of one zygote (use as a context manager)."""

    def __init__(self, scratch: Path, env: dict[str, str]) -> None:
        self.scratch, self.env, self.n = scratch, env, 0
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        assert ready and json.loads(ready) == {"ready": True}, "the CLI zygote did not start"

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """`perfloop ARGS` in a new child with `env` (default: the zygote's) as its whole environment."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.n += 1
        out, err = self.scratch / f"cli-{self.n}.out", self.scratch / f"cli-{self.n}.err"
        req = {"args": list(args), "env": env or self.env, "out": str(out), "err": str(err)}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the CLI zygote died"
        code = json.loads(line)["returncode"]
        return subprocess.CompletedProcess(["perfloop", *args], code, out.read_text(), err.read_text())

    def __enter__(self) -> ForkedCli:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
