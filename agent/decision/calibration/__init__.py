"""Learning the launch noise and the power on purpose: A/A pairs launched beside the baseline
until the store holds enough, and the power that sets requests per look (`autoaa`), and
`perfloop calibrate`'s A/A launches on demand (`calibrate`), and what calibration publishes: the
rule's false calls on the A/A evidence against the nominal rate, the smallest gain kept
(`published`, pure). The noise and power statistics
themselves are pure functions in `stats` (`noise`, `power`).

May import: `arms`, `stats`, `judging`, `agent.context`, `agent.serving`, `tools`, `state`.
Imported by `rules` and the `calibrate` command.
"""
