"""Hidden code in a patch (docs/SECURITY.md, finding 1): a patch that adds a character a reviewer
does not see as it is (a terminal control sequence, a bidi control, an invisible format character)
is refused by the one patch gate, whatever its source, with one line naming file and line; and what
the CLI prints from the store shows such characters as escapes, read by a real terminal emulator
(tmux) as a reviewer's terminal would read it."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cli import render, terminal
from agent.proposer.edits.checks import gate_problem
from state.door.calls import ApplyArgs
from tests.e2e.conftest import PERFLOOP, edited_diff, git, last_json, make_repo, perfloop, write_target
from tests.integration.test_git_workspace import PATCH, TRAILERS, world
from tests.integration.test_patch_gate import _ws
from tests.procs import processes_in
from tools.errors import PatchError
from tools.workspace import repo as repo_tools
from tools.workspace.hidden import visible
from tools.workspace.patch_check import gate_patch

HIDDEN = {
    "ESC sequence": "\x1b[2K",
    "CR mid-line": "\r",
    "backspace": "\b",
    "form feed": "\x0c",
    "DEL": "\x7f",
    "C1 CSI": "\x9b2K",
    "RLO bidi override": "\u202e",
    "LRI bidi isolate": "\u2066",
    "PDI": "\u2069",
    "zero-width space": "\u200b",
    "RLM": "\u200f",
    "word joiner": "\u2060",
    "invisible times": "\u2062",
    "BOM mid-file": "\ufeff",
    "Hangul filler": "\u3164",
    "Hangul choseong filler": "\u115f",
    "Hangul jungseong filler": "\u1160",
    "halfwidth Hangul filler": "\uffa0",
    "combining grapheme joiner": "\u034f",
    "variation selector-1": "\ufe00",
    "variation selector-16": "\ufe0f",
    "variation selector-17": "\U000e0100",
    "variation selector-256": "\U000e01ef",
    "soft hyphen": "\u00ad",
    "tag character": "\U000e0041",
    # issue 56: Default_Ignorable_Code_Point (and the fillers), not a list written by hand
    "Khmer vowel inherent AQ": "\u17b4",
    "Khmer vowel inherent AA": "\u17b5",
    "Khitan small script filler": "\U00016fe4",
    "reserved default-ignorable": "\u2065",
    "Mongolian free variation selector": "\u180b",
    # issue 62: a renderer may break the line there
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
}
# What a reviewer's terminal shows as `+import sys`; the line committed runs a shell command.
PAYLOAD = "import os; os.system('touch PWNED')  # \x1b[2K\r+import sys"


@pytest.mark.parametrize("case", sorted(HIDDEN))
def test_a_patch_adding_a_hidden_character_is_refused_naming_file_and_line(tmp_path: Path, case: str) -> None:
    ws = _ws(tmp_path)
    diff = PATCH.replace("+line 10 patched", f"+line 10 pa{HIDDEN[case]}tched")
    before = world(ws)
    with pytest.raises(PatchError) as err:
        gate_patch(ws.root, diff)
    msg = str(err.value)
    code = f"U+{ord(HIDDEN[case][0]):04X}"
    assert msg.startswith("patch refused: pkg/mod.py line 10 (patch line 9) holds " + code), msg
    assert "\n" not in msg and visible(msg) == msg  # one line, itself printable
    with pytest.raises(PatchError, match=re.escape(code)):  # a playbook's patch goes through the same gate
        repo_tools.apply_patch(ApplyArgs(repo=ws.root, diff=diff, subject="s", trailers=TRAILERS))
    problem = gate_problem(diff, 1 << 20)  # a model's patch: the same rule, told to the model
    assert problem is not None and code in problem and "pkg/mod.py line 10" in problem
    assert world(ws) == before


@pytest.mark.parametrize(
    ("word", "says"),
    [
        ("\u043es.system", "mixes CYRILLIC and LATIN letters"),  # a Cyrillic o
        ("\uff50rint", "U+FF50 FULLWIDTH LATIN SMALL LETTER P, read as 'p'"),  # Python reads `print`
        ("r\u0435ad", "mixes CYRILLIC and LATIN letters"),  # a Cyrillic e
    ],
)
def test_a_look_alike_word_is_refused_by_the_gate(tmp_path: Path, word: str, says: str) -> None:
    """Issue 62: a word of two scripts, or with a letter NFKC folds into another, in an added line."""
    ws = _ws(tmp_path)
    diff = PATCH.replace("+line 10 patched", f"+line 10 {word}(1)")
    before = world(ws)
    with pytest.raises(PatchError) as err:
        gate_patch(ws.root, diff)
    msg = str(err.value)
    assert msg.startswith("patch refused: pkg/mod.py line 10 (patch line 9): the word") and says in msg, msg
    assert "\n" not in msg and world(ws) == before
    assert gate_patch(
        ws.root, PATCH.replace("+line 10 patched", "+line 10 caf\u00e9 = '\u043f\u0440\u0438'")
    ) == ["pkg/mod.py"]


def test_a_marker_line_inside_a_hunk_is_read_too(tmp_path: Path) -> None:
    """Issue 56: a `\\ ` line (git's `\\ No newline at end of file`, whose text git ignores) in the
    middle of a hunk carrying a hidden character is refused; the plain marker passes the text scan."""
    from state.engines.workspace import PatchPolicy
    from tools.workspace.patch_check import scan_patch

    hunk = "--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-import sys\n{marker}\n+import os\n\\ No newline at end of file\n"
    plain = hunk.format(marker="\\ No newline at end of file")
    assert scan_patch(plain, PatchPolicy()) == ["m.py"]
    for hidden in ("\x1b[2K", "\u202e", "\u17b4", "\U00016fe4"):
        hostile = hunk.format(marker=f"\\ No newline{hidden} at end of file")
        with pytest.raises(
            PatchError, match=rf"m.py marker line \(patch line 5\) holds U\+{ord(hidden[0]):04X}"
        ):
            scan_patch(hostile, PatchPolicy())


def test_every_line_after_a_signature_line_is_read_too(tmp_path: Path) -> None:
    """`git apply` applies a diff that follows a `-- ` line: the gate reads on, and refuses a
    hidden character there, or any diff after the signature."""
    ws = _ws(tmp_path)
    before = world(ws)
    second = PATCH.replace("+line 10 patched", "+line 10 pa\u3164tched")
    for tail, says in (
        ("-- \n2.43.0\n" + second, "line 15: diff text after the `-- ` signature line"),
        ("-- \n2.43\u202e.0\n", "U+202E"),
    ):
        with pytest.raises(PatchError, match=re.escape(says)):
            gate_patch(ws.root, PATCH + tail)
    assert gate_patch(ws.root, PATCH + "-- \n2.43.0\n\n")  # a plain signature passes
    assert world(ws) == before


def test_a_hidden_file_name_is_refused(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    for ch in ("\u3164", "\u034f", "\ufe0f"):
        diff = PATCH.replace("pkg/mod.py", f"pkg/mod{ch}.py")
        with pytest.raises(PatchError, match=f"U\\+{ord(ch):04X}"):
            gate_patch(ws.root, diff)


def test_plain_text_crlf_endings_and_a_leading_bom_pass(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    assert gate_patch(ws.root, PATCH.replace("+line 10 patched", "+line 10\tpatched é ünïcode")) == [
        "pkg/mod.py"
    ]
    new = "diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1,2 @@\n"
    assert gate_patch(ws.root, new + "+\ufeffx = 1\r\n+y = 2\r\n") == ["n.py"]
    with pytest.raises(PatchError, match="n.py line 2 .*U\\+FEFF"):
        gate_patch(ws.root, new + "+x = 1\n+\ufeffy = 2\n")
    ws.close()


def test_a_hidden_command_in_a_stored_diff_prints_visibly() -> None:
    out = terminal.console()
    out.file = io.StringIO()
    diff = f"diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-import sys\n+{PAYLOAD}\n"
    req = _request(diff, title="[red]t[/red] \x1b]0;x\x07", explanation="why \u202e sdrawkcab")
    render.approval(out, req)
    text = out.file.getvalue()
    assert "\x1b[2K" not in text and "\r" not in text and "\u202e" not in text
    assert "os.system('touch PWNED')  # \\x1b[2K\\x0d+import sys" in text
    assert "[red]t[/red] \\x1b]0;x\\x07" in text and "why \\u202e sdrawkcab" in text


def _request(diff: str, title: str = "t", explanation: str = "e") -> dict:
    return {
        "session": "s1",
        "playbook": "p",
        "title": title,
        "explanation": explanation,
        "expected_gain_ms": 1.0,
        "expected_gain_share": 0.1,
        "files": ["m.py"],
        "diff": diff,
        "launch_argv": None,
        "evidence": [],
        "proposer": "playbook",
    }


class Tmux:
    """A real terminal emulator (tmux, on its own socket) running a shell; what it shows is read
    with `capture-pane`, wrapped lines joined."""

    def __init__(self, env: dict[str, str]) -> None:
        self.sock = f"perfloop-test-{uuid.uuid4().hex[:8]}"
        self.runs = 0
        self.env = {**os.environ, **env}  # the server's (so the shell's), kept off its command line
        self._tmux("new-session", "-d", "-s", "t", "-x", "230", "-y", "60", "bash --norc")

    def _tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.sock, "-f", "/dev/null", *args],
            check=True,
            capture_output=True,
            text=True,
            env=self.env,
        ).stdout

    def run(self, command: str, timeout_s: float = 300) -> str:
        """Type `command` into the shell, wait until it ends; the whole pane since the last clear."""
        # A marker of its own per command: until the shell runs `clear`, the pane still shows the
        # previous command's marker (a fast capture once returned that old pane).
        self.runs += 1
        self._tmux("send-keys", "-t", "t", "clear; tmux clear-history 2>/dev/null; " + command, "Enter")
        self._tmux("send-keys", "-t", "t", f"echo __DO''NE_{self.runs}__", "Enter")
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            pane = self._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "t")
            if f"\n__DONE_{self.runs}__" in pane:
                return pane
            time.sleep(0.3)
        raise AssertionError(f"{command} did not end in {timeout_s} s:\n{pane}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    assert subprocess.run(["which", "tmux"], capture_output=True).returncode == 0, (
        "tmux is missing: `make system-deps` installs it"
    )
    t = Tmux({"PERFLOOP_HOME": str(tmp_path / "home"), "TERM": "xterm-256color"})
    yield t
    t.close()


@pytest.mark.e2e
def test_in_a_real_terminal_hidden_code_is_visible_and_an_edited_patch_with_it_is_refused(
    tmp_path: Path, tmux: Tmux
) -> None:
    home, repo = tmp_path / "home", make_repo(tmp_path / "engine")
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    # A target (or store) name that would wipe its own line on a terminal: `perfloop sessions` prints it.
    target.write_text(target.read_text().replace('name = "e2e mla_server"', 'name = "evil-name\\u001b[2Kok"'))
    run = perfloop(home, "run", str(target), "--approve", "manual", "--json", "--max-iterations", "1")
    assert run.returncode == 0, run.stderr[-2000:]
    sid = last_json(run)["session"]
    pane = tmux.run(f"{PERFLOOP} sessions")
    assert "evil-name\\x1b[2Kok" in pane, pane

    # The paused session's own approval view, its diff replaced by one hiding a command, printed
    # by the CLI's renderer as a store peer's or an old session's stored diff would be.
    marked = PAYLOAD.replace("\x1b[2K\r", "HIDE")  # git's output is read as text: \r would split the line
    edited = edited_diff(
        repo, tmp_path, {"mla_server/config.py": [("import sys\n", f"import sys\n{marked}\n")]}
    )
    section = next(s for s in edited.split("diff --git") if "config.py" in s)
    hostile = "diff --git" + section.replace("HIDE", "\x1b[2K\r")
    view = tmp_path / "view.json"
    view.write_text(json.dumps(_request(hostile)))
    show = f"from agent.cli import render, terminal; import json; render.approval(terminal.console(), json.load(open({str(view)!r})))"
    pane = tmux.run(f"{shlex.quote(sys.executable)} -c {shlex.quote(show)}")
    assert "os.system('touch PWNED')  # \\x1b[2K\\x0d+import sys" in pane, pane

    # The same diff as a human's edit (`approve --patch`, the page's edit box runs this too).
    (tmp_path / "edit.diff").write_text(hostile)
    head, status = git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain")
    pane = tmux.run(f"{PERFLOOP} approve {sid} --patch {tmp_path / 'edit.diff'}")
    assert "patch refused: mla_server/config.py line 5 (patch line" in pane, pane
    assert "U+001B" in pane
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "status", "--porcelain") == status
    assert not (repo / "PWNED").exists()
    listed = json.loads(perfloop(home, "sessions", "--json").stdout)
    assert [s["status"] for s in listed] == ["paused"]
    for pid in processes_in(tmp_path):  # the paused session's servers
        os.kill(pid, 9)
