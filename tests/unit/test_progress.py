"""Progress lines: shown by the reporter, kept (redacted) in a running session's folder for the
approval page, prefixed with where in a step they come from."""

from __future__ import annotations

from pathlib import Path

from tools import progress, secrets


def test_lines_are_kept_redacted_while_a_session_runs_and_removed_after(tmp_path: Path) -> None:
    shown: list[str] = []
    progress.set_reporter(shown.append)
    secret = "sk-progress-test-0123456789abcdef"
    secrets.register(secret)
    try:
        progress.report("before any session")  # nowhere to keep it
        assert progress.read_latest(tmp_path) is None
        progress.keep_in(tmp_path / "session")
        with progress.within("look 2/3"):
            progress.report("measuring candidate: request 4/6")
        latest = progress.read_latest(tmp_path / "session")
        assert latest is not None and latest["message"] == "look 2/3: measuring candidate: request 4/6"
        progress.report(f"server log: token {secret}")
        kept = (tmp_path / "session" / progress.FILE).read_text()
        assert secret not in kept and "token" in kept
        assert shown[1] == "look 2/3: measuring candidate: request 4/6"
        progress.report("after the look")
        assert progress.read_latest(tmp_path / "session")["message"] == "after the look"  # type: ignore[index]
    finally:
        progress.keep_in(None)
        progress.set_reporter(lambda message: None)
    assert not (tmp_path / "session" / progress.FILE).exists()
    assert progress.read_latest(tmp_path / "session") is None
