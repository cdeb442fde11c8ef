"""`perfloop replay` reads back the replay kept under the key it would run with (issue 63): the same
recording, perfloop's sources (each file's size and change time), Python and the libraries, so the
graph run again could not decide otherwise (agent/sessions/reading/replayed.py). Read back, it loads
no LangGraph and prints what the graph run printed, saying it read it back; a changed source or
recording, or `--again`, runs the graph (which keeps its states again); a replay that diverged is
never kept, so never read back. Checked by the modules a fresh interpreter loaded (test_cli_startup)."""

import json
import os
from pathlib import Path

from agent.cli.commands.sessions import READ_BACK
from agent.sessions.reading import replayed
from tests.unit.test_cli_startup import RECORDING, ROOT, started
from tools.store.sessions import SessionStore

GRAPH = ("langgraph", "langchain_core", "agent.graph", "agent.sessions.reading.replaying")
"""What running the graph loads and reading back must not."""
SOURCE = ROOT / "playbooks" / "catalog"
"""A folder of perfloop's sources whose change time the key holds (its files: `replayed.SOURCES`)."""


def replay(tmp: Path, *argv: str) -> tuple[bool, str, str, int]:
    """(whether it loaded the graph, stdout, stderr, exit code) of `perfloop replay last ARGV`."""
    mods, proc = started(tmp, "replay", "last", *argv, heavy=GRAPH)
    assert bool(mods) == ("agent.graph" in mods), mods  # the graph and LangGraph come together
    return bool(mods), proc.stdout, proc.stderr, proc.returncode


def kept_file(tmp: Path) -> Path:
    (file,) = (tmp / "home" / "replayed").iterdir()
    return file


def test_a_second_replay_reads_the_first_back_without_langgraph(tmp_path: Path) -> None:
    mods, proc = started(tmp_path, "import", str(RECORDING), heavy=GRAPH)
    assert proc.returncode == 0 and mods, proc.stderr  # the import replays it: the graph
    kept_file(tmp_path).unlink()  # none kept: the first replay runs the graph, then keeps it
    graphed, out, err, code = replay(tmp_path)
    assert graphed and code == 0 and READ_BACK not in err, err
    assert "transitions: same" in err and kept_file(tmp_path).is_file()
    read, out2, err2, code2 = replay(tmp_path)
    assert not read and code2 == 0, (err2, read)
    assert out2 == out and out.startswith("perfloop session ")
    line = next(s for s in err.splitlines() if s.startswith("replayed "))
    assert f"{line} {READ_BACK}" in err2.splitlines(), err2

    read, first, err, code = replay(tmp_path, "--json")  # read back, then the graph run again
    assert not read and code == 0 and READ_BACK in err
    graphed, again, err, code = replay(tmp_path, "--json", "--again")
    assert graphed and code == 0 and READ_BACK not in err
    back, ran = json.loads(first), json.loads(again)
    assert back.pop("read_back") is True and ran.pop("read_back") is False
    assert back == ran and back["matches_recording"] is True and back["accepted"]


def test_a_changed_source_or_recording_runs_the_graph_and_a_divergence_is_never_kept(tmp_path: Path) -> None:
    assert started(tmp_path, "import", str(RECORDING), heavy=GRAPH)[1].returncode == 0
    assert not replay(tmp_path)[0]  # kept by the import: read back
    source = next(p for p in sorted(SOURCE.rglob("*")) if p.is_file())
    seen = source.stat()
    try:  # the same bytes, another change time: the key is another
        os.utime(source, ns=(seen.st_atime_ns, seen.st_mtime_ns + 1_000_000_000))
        graphed, _, err, code = replay(tmp_path)
        assert graphed and code == 0 and READ_BACK not in err, err
        assert not replay(tmp_path)[0]  # the graph run kept its states under the new key
    finally:
        os.utime(source, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    assert replay(tmp_path)[0]  # the key of before: its file was replaced since

    store = SessionStore.open(tmp_path / "home")
    (info,) = store.list_sessions()
    last = store.tool_calls(info.id)[-1]  # one more call the replay never makes: it diverges
    store.record(last.model_copy(update={"seq": store.next_seq(info.id)}))
    before = kept_file(tmp_path).read_bytes()
    for _ in range(2):
        graphed, _, err, code = replay(tmp_path)
        assert graphed and code == 1 and "replay diverged:" in err and "1 more call(s)" in err, err
    mods, proc = started(tmp_path, "show", "last", "--json", heavy=GRAPH)  # its states, shown, not kept
    assert proc.returncode == 0 and "agent.graph" in mods and json.loads(proc.stdout)["transitions"]
    assert kept_file(tmp_path).read_bytes() == before
    assert replayed.read(tmp_path / "home", info.id, replayed.key(store, info.id)) is None
    store.close()
