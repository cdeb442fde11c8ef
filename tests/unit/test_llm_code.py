"""tools/llm/code.py: the model's read-only code tools."""

from __future__ import annotations

from pathlib import Path

from state.proposers.llm_tools import FilesArgs
from tools.llm.code import grep, read_file, read_texts


def test_code_tools_hide_the_instrumentation_and_map_traced_lines(tmp_path: Path) -> None:
    text = (
        "import os\n@prof  # perfloop-instrumentation\n# perfloop-instrumentation\ndef f():\n    return 1\n"
    )
    (tmp_path / "m.py").write_text(text)
    assert (
        read_file(tmp_path, "m.py", None, None)
        == "m.py (lines 1-3 of 3)\n1\timport os\n2\tdef f():\n3\t    return 1"
    )
    assert read_file(tmp_path, "m.py", None, None, around=5, context=0).endswith("3\t    return 1")
    assert "perfloop-instrumentation" not in grep(tmp_path, "perfloop|def", ".")
    texts = read_texts(FilesArgs(repo=tmp_path, paths=["m.py", "gone.py", "../m.py"])).texts
    assert texts == {"m.py": "import os\ndef f():\n    return 1\n", "gone.py": None, "../m.py": None}
