"""A session's graph state: `LoopState` (`loop`), a node's update of it (`updates`), the payload of a
parallel trial (`fanout`), the session's index entry and summary (`session`), and identifiers that
come from outside (`ids`).

Imports every other part of `state` but `door`. Imported by `state.door` (ids), tools/paths,
tools/store and agent/."""
