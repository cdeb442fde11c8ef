"""One trace's analysis: its collected columns in, its `ProfileSummary` out (pure, numpy).

`summary` runs it: `tree` nests each host thread (numpy on both halves of the events at once),
`host` puts its events in order with what each inherits, `walk` attributes device time, CPU time
and syncs to operators, `windows` finds the decode steps (markers, else the work's repetition),
`device` gives the kernel view and idle gaps, `bounds` says whether host or device bounds each
step, and `checks` refuses a trace that cannot describe decode.

May import: `read` (the columns' types), `state.profiling.profile`, `tools.errors`. Imported by `ranks`
(each worker's summary) and by readers of the step markers (`windows.marker_kind`: the vLLM tests,
benchmarks/gain_heldout.py).
"""
