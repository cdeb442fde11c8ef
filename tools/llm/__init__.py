"""Tools of the LLM proposer: the model call (`llm.chat`) and the model's read-only look at the repo."""
