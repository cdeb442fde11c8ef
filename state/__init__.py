"""Pydantic models: the target file, processes and servers, measurements, profiles, diagnoses,
workspace values, tool-call records, the graph state `LoopState` (`loop`) and a node's update of it
(`updates.LoopUpdate`).

Imports nothing of perfloop's: every other package may import it.
"""
