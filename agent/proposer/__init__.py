"""The LLM proposer: a conversation of recorded door calls that ends in a validated patch.

`blocks` parses and applies SEARCH/REPLACE edit blocks and builds the diff (pure); `checks` is the
validation chain; `prompt` is what the model is told; `conversation` runs model -> tools -> model
within the `propose` node, each model call a recorded (and after a crash, reused) door call.
"""
