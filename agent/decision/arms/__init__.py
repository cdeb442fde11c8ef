"""How the arms run and are measured: which arms a session uses (`arms`: interleaved, alternating
or cross-host, `auto` resolved once), a candidate look by look on its launch (`measuring`), both
arms live at once with requests alternated (`interleave`), the trees launched in turn
(`alternating`), the reference on another host at the same time (`crosshost`, `referencehost`),
and the A/A launches a session makes anyway (`aalaunches`).

May import: `gate`, `stats`, `judging`, `agent.context`, `agent.serving`, `agent.hostrun`,
`tools`, `state`. Imported by `calibration`, `rules` and `agent.sessions` (the summary, interrupts).
"""
