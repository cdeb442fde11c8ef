"""A small but real MLA decode server whose decode step casts the whole FP8 KV pool to BF16.

Standard library + torch only. See README.md for the design and the bottleneck it mirrors.
"""
