"""The docs are maps, not references (issue 48): each docs/*.md at most 300 lines, the README at
most 250; every relative link goes to a file (and heading) that exists; every repository path a
doc names in backticks (`agent/...`, `tools/...`, `state/...`, `playbooks/...`, `tests/...`,
`benchmarks/...`, `examples/...`) exists, so a moved module cannot leave a doc pointing nowhere;
docs/ARCHITECTURE.md links nowhere outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
README = ROOT / "README.md"
MAX_DOC_LINES = 300
MAX_README_LINES = 250
PACKAGES = ("agent", "tools", "state", "playbooks", "tests", "benchmarks", "examples")


def too_long(path: Path, limit: int) -> str | None:
    """`path`'s name and length when it has more than `limit` lines (pure but for the read)."""
    n = len(path.read_text().splitlines())
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return f"{name}: {n} lines (at most {limit})" if n > limit else None


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading line (pure)."""
    text = re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower())
    return text.replace(" ", "-")


def broken_links(doc: Path) -> list[str]:
    """The relative links of `doc` whose file, or heading, does not exist."""
    broken = []
    for link in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"^[a-z]+:", link):
            continue
        path, _, fragment = link.partition("#")
        target = (doc.parent / path).resolve() if path else doc
        if not target.exists():
            broken.append(link)
        elif fragment and target.suffix == ".md":
            lines = target.read_text().splitlines()
            if fragment not in {anchor(line) for line in lines if line.startswith("#")}:
                broken.append(link)
    return broken


def missing_paths(doc: Path) -> list[str]:
    """The repository paths `doc` names in backticks (`pkg/.../file.py`, `pkg/folder/`, with an
    optional `:symbol` or `::test`) that do not exist; placeholders (`<id>`, `*`, `ID`) are skipped."""
    missing = []
    for token in re.findall(r"`([^`\s]+)`", doc.read_text()):
        path = token.split("::")[0].split(":")[0].rstrip(".,;")
        if not path.startswith(tuple(p + "/" for p in PACKAGES)) or re.search(r"[<>*{}]|/[A-Z]+/", path):
            continue
        named = path.endswith("/") or path.endswith((".py", ".md", ".toml", ".sh", ".diff", ".json", ".gz"))
        if named and not (ROOT / path).exists():
            missing.append(token)
    return missing


def test_every_doc_is_a_map_under_its_length() -> None:
    problems = [p for d in DOCS if (p := too_long(d, MAX_DOC_LINES))]
    problems += [p for p in [too_long(README, MAX_README_LINES)] if p]
    assert not problems, "split or cut these docs: " + "; ".join(problems)


def test_the_length_check_sees_a_long_doc(tmp_path: Path) -> None:
    long = tmp_path / "long.md"
    long.write_text("line\n" * (MAX_DOC_LINES + 1))
    assert too_long(long, MAX_DOC_LINES) == f"long.md: {MAX_DOC_LINES + 1} lines (at most 300)"
    assert too_long(long, MAX_DOC_LINES + 1) is None


def test_every_relative_link_and_anchor_exists() -> None:
    broken = {str(d.relative_to(ROOT)): b for d in [README, *DOCS] if (b := broken_links(d))}
    assert not broken


def test_every_path_a_doc_names_exists() -> None:
    missing = {str(d.relative_to(ROOT)): m for d in [README, *DOCS] if (m := missing_paths(d))}
    assert not missing


def test_the_architecture_map_links_nowhere_outside() -> None:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert not re.findall(r"https?://|\]\(//", text)


def test_a_broken_link_and_a_missing_path_are_found(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[a](nowhere.md) [b](#no-such-heading)\n# Here\n[c](#here) `agent/no_such_module.py` `agent/graph.py`\n"
    )
    assert broken_links(doc) == ["nowhere.md", "#no-such-heading"]
    assert missing_paths(doc) == ["agent/no_such_module.py"]
