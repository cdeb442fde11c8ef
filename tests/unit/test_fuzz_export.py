"""Fuzzing the export format (Hypothesis): whatever the file holds, `perfloop import` (and, for what
it accepts, replay, show and export) exits 0, 1 (a replay that diverges) or 2, never 3, and writes
nothing outside $PERFLOOP_HOME (the `scratch` fixture checks)."""

from __future__ import annotations

import copy
import gzip
import itertools
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_untrusted_ids import DEMO, cli

HOSTILE_TEXT = st.sampled_from(
    [
        "../../..",
        "/tmp/perfloop-fuzz",
        "..",
        ".",
        "a/../../b",
        "x\x00y",
        "",
        " ",
        "~",
        "$HOME",
        "%2e%2e",
        "é" * 70,
    ]
)
TEXT = st.one_of(HOSTILE_TEXT, st.text(max_size=30))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_n = itertools.count()


def paths(doc, prefix=()) -> list[tuple]:
    """Every path to a value inside a JSON document."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            out += paths(v, (*prefix, i))
    return out


ALL_PATHS = [p for p in paths(DEMO) if p]


def set_at(doc, path: tuple, value):
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def check(scratch, doc, raw: bytes | None = None) -> None:
    name = f"fuzz-{next(_n)}.json" + (".gz" if next(_n) % 2 else "")
    data = raw if raw is not None else json.dumps(doc).encode()
    file = scratch.write(name, gzip.compress(data) if name.endswith(".gz") else data)
    code, out, err = cli(scratch, "import", str(file))
    assert code in (0, 2), (code, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
        return
    sid = out.split()[2].rstrip(";")
    assert cli(scratch, "show", sid)[0] in (
        0,
        2,
    )  # shown from its replay, or one line when it does not replay
    exported = scratch.inputs / f"{name}.out.json"
    scratch.allow(exported)
    assert cli(scratch, "export", sid, "-o", str(exported))[0] == 0
    code, _, err = cli(scratch, "replay", sid)
    assert code in (0, 1, 2), (code, err)


@FUZZ
@given(doc=JSON)
def test_random_documents(scratch, doc) -> None:
    check(scratch, doc)


@FUZZ
@given(path=st.sampled_from(ALL_PATHS), value=JSON)
def test_the_real_export_with_one_value_replaced(scratch, path, value) -> None:
    check(scratch, set_at(copy.deepcopy(DEMO), path, value))


@FUZZ
@given(sid=TEXT)
def test_any_session_id(scratch, sid) -> None:
    doc = copy.deepcopy(DEMO)
    doc["session"]["id"] = sid
    for call in doc["tool_calls"]:
        call["session_id"] = sid
    for state in doc["initial"]:
        state["session_id"] = sid
    check(scratch, doc)


@FUZZ
@given(data=st.binary(max_size=200), cut=st.integers(min_value=0, max_value=4000))
def test_bytes_and_truncated_files(scratch, data, cut) -> None:
    check(scratch, None, raw=data)
    check(scratch, None, raw=json.dumps(DEMO).encode()[:cut])
