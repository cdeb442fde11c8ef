"""The session store: where recordings, sessions, leases and A/A launches live.

`db` (SQLite under $PERFLOOP_HOME or PostgreSQL from $PERFLOOP_STORE, one versioned schema),
`sessions` (`SessionStore`: the session index, inputs, the recording of every door call), `lease`
(the per-session lock shared by every machine on the store), `aa` (the A/A launch store as a door
tool).

May import: `tools.door.registry`, `tools.secrets`, `tools.paths`, `tools.errors`, `state`.
"""
