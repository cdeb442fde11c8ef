"""The output gate's tools beyond greedy texts: scoring texts for the tolerance policy."""
