"""The loop: a LangGraph graph (`graph`, its run-time context `context`, its drawing `diagram`).

`steps/` the nodes; `decision/` how a candidate is judged; `proposer/` the model's conversation;
`serving` starting and measuring a server (steps and decision both do); `hostrun` a run on one of
the target's `[[hosts]]` (parallel trials, cross-host arms' reference host); `sessions/` start, resume,
fork, replay, export; `cli/` the `perfloop` command; `report/` and `web/` the HTML report and the
approval page. Imports run downward in that order: cli/web/report -> sessions -> graph -> steps ->
decision/proposer -> hostrun -> serving -> context; all may import `tools`, `playbooks`, `state`, never the
other way round.
"""
