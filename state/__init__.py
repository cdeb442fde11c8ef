"""Pydantic models: the target file, processes and servers, measurements, profiles, diagnoses,
workspace values, tool-call records and the graph state `LoopState` (`loop`).

Imports nothing of perfloop's: every other package may import it.
"""
