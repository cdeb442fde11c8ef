"""Predicted vs realized speedup of each decision in recorded sessions, offline.

Imports each export into a temporary PERFLOOP_HOME, replays it (every tool call answered from the
recording, the diagnosis recomputed by this checkout's gain model from the recorded profiles), and
prints one Markdown row per decision: TPOT before and after, realized and predicted speedup, and
their ratio. Usage: python benchmarks/predicted_vs_realized.py EXPORT.json.gz...
"""

import os
import sys
import tempfile
from pathlib import Path


def main(exports: list[str]) -> None:
    os.environ["PERFLOOP_HOME"] = tempfile.mkdtemp(prefix="perfloop-pvr-")
    from agent.sessions.archive import import_session
    from agent.sessions.runner import Sessions

    sessions = Sessions()
    print(
        "| session | iter | fix | verdict | TPOT before -> after (ms) | realized | predicted | realized / predicted |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for export in exports:
        sid = import_session(sessions.store, Path(export))
        state, _ = sessions.replay(sid)
        for d in state.decisions:
            realized = d.tpot_ms_before / d.tpot_ms_after if d.tpot_ms_after else None
            predicted = d.predicted_speedup
            ratio = f"{realized / predicted:.2f}" if realized and predicted else "-"
            print(
                f"| {sid} | {d.iteration} | {d.source} | {d.verdict} | {d.tpot_ms_before:.1f} -> "
                f"{d.tpot_ms_after:.1f} | {realized:.2f}x | "
                f"{'-' if predicted is None else f'{predicted:.2f}x'} | {ratio} |"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
