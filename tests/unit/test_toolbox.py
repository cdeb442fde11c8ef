"""tools/toolbox.py: every door tool, listed once, and every name a recording holds found again."""

import gzip
import importlib
import json
import pkgutil
from pathlib import Path

import pytest

import tools
from tools.door.registry import SPEC_ATTR, spec_of
from tools.toolbox import BY_NAME, TOOLS, spec_named

RECORDING = Path(__file__).parents[1] / "data" / "sessions" / "demo-session.json.gz"


def declared_tools() -> set:
    """Every function that `@tool` declared in the tools package, found by importing each module."""
    found = set()
    for info in pkgutil.walk_packages(tools.__path__, "tools."):
        module = importlib.import_module(info.name)
        found |= {
            fn
            for fn in vars(module).values()
            if hasattr(fn, SPEC_ATTR) and getattr(fn, "__module__", None) == module.__name__
        }
    return found


def test_every_declared_tool_is_in_the_list_once():
    assert set(TOOLS) == declared_tools()
    assert len(TOOLS) == len(set(TOOLS)) == len(BY_NAME)  # no function twice, no name twice


def test_a_recorded_name_finds_its_tool_again():
    recorded = {call["name"] for call in json.loads(gzip.decompress(RECORDING.read_bytes()))["tool_calls"]}
    assert recorded and all(spec_named(name).name == name for name in recorded)
    assert spec_of(spec_named("server.launch").fn) is spec_named("server.launch")
    with pytest.raises(KeyError, match="no tool named 'server.start'; known: .*'server.launch'"):
        spec_named("server.start")
