"""Every "docs/spec.md section N" the code cites is a section of docs/spec.md (issue 39): the
repository carries its whole specification, numbered as the code cites it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITE = re.compile(r"docs/spec\.md\s+sections?\s+(\d+(?:\.\d+)?)(?:\s*-\s*(\d+))?")


def headings() -> set:
    text = (ROOT / "docs" / "spec.md").read_text()
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, flags=re.M))


def citations() -> list:
    out = []
    for root in ("spotref", "tests", "benchmarks", "examples"):
        for path in sorted((ROOT / root).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                for m in CITE.finditer(line):
                    out += [(f"{path.relative_to(ROOT)}:{n}", s) for s in m.groups() if s]
    return out


def test_every_cited_section_exists():
    have = headings()
    assert {"1", "2", "2.1", "3", "4", "5", "6", "7"} <= have, have
    missing = [(where, s) for where, s in citations() if s not in have]
    assert len(citations()) > 20 and not missing, missing


def test_no_citation_of_a_spec_the_user_does_not_have():
    old = [
        str(p.relative_to(ROOT))
        for root in ("spotref", "tests", "examples", "benchmarks")
        for p in (ROOT / root).rglob("*.py")
        if re.search(r"\bSPEC sections? \d", p.read_text())
    ]
    assert old == []
