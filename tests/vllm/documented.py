"""The real-vLLM commands as the docs give them, read from the files (never copied into a test):
docs/VLLM.md's ```bash block under each `### Session N` heading, and the README's `make vllm...`
lines, which must be the same commands. `run` runs them verbatim in the repository's root, as a
user who cloned it would."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VLLM_MD = ROOT / "docs" / "VLLM.md"
README = ROOT / "README.md"


def bash_lines(text: str) -> list[str]:
    """The command lines of the ```bash blocks of `text`, comments dropped (pure)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S)
    lines = [line.split("  #")[0].strip() for b in blocks for line in b.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def session_commands(number: int) -> list[str]:
    """docs/VLLM.md's commands for `### Session N: ...` (up to the next heading)."""
    text = VLLM_MD.read_text()
    m = re.search(rf"^### Session {number}\b.*?$(.*?)(?=^#)", text + "\n#", flags=re.M | re.S)
    assert m, f"docs/VLLM.md has no '### Session {number}' section"
    lines = bash_lines(m.group(1))
    assert lines, f"docs/VLLM.md: Session {number} gives no command"
    return lines


def readme_vllm_commands() -> list[str]:
    """The README's real-vLLM commands (`make vllm...`)."""
    return [c for c in bash_lines(README.read_text()) if c.startswith("make vllm")]


def run(lines: list[str], home: Path, timeout_s: float, env: dict[str, str] | None = None) -> list[str]:
    """Each line run by bash in the repository's root with its own PERFLOOP_HOME (plus `env`), in
    order, each to exit 0; their outputs (stdout and stderr)."""
    outputs = []
    for line in lines:
        proc = subprocess.run(
            ["bash", "-c", line],
            cwd=ROOT,
            env={**os.environ, "PERFLOOP_HOME": str(home), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, (line, proc.stdout[-2000:], proc.stderr[-3000:])
        outputs.append(proc.stdout + proc.stderr)
    return outputs
