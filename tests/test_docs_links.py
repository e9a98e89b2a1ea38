"""The documents point at things that exist.

Every relative link in README.md and docs/**/*.md names an existing file (and, with an
anchor, a heading of that file, slugged as GitHub does). Every test a document cites
as ``tests/FILE.py::name`` exists. Every decision record in docs/decisions/ has the
sections of docs/decisions/README.md, a valid status, a "Proved by" section citing
tests that exist, and a row in the index of docs/design.md.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
DECISIONS = ROOT / "docs" / "decisions"
RECORDS = sorted(DECISIONS.glob("[0-9][0-9][0-9][0-9]-*.md"))
SECTIONS = ["Status", "Context", "Decision", "Alternatives rejected", "Consequences", "Proved by"]

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_HTML_ANCHOR = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
#: ``tests/FILE.py`` or ``tests/FILE.py::name`` (lower-case paths: ``tests/FILE.py`` is a placeholder).
_CITATION = re.compile(r"\btests/[a-z0-9_./-]*?\.py(?:::\w+)*")
_RECORD_TITLE = re.compile(r"^# (\d{4})\. (.+)$")
_STATUS = re.compile(r"^(?:Accepted \((\d{4}-\d{2}-\d{2})\)|Superseded by (\d{4}))$")
#: What a future maintainer could not read: private conversations, briefs, bare issue numbers.
_UNREADABLE = re.compile(r"\bthe brief\b|\bissue #?\d+|\bPR #?\d+|(?<![\w/&])#\d+\b", re.IGNORECASE)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for no, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is None:
            out.append((no, line))
    return out


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: markup dropped, lower case, punctuation removed,
    spaces turned into hyphens (duplicates are numbered by :func:`anchors`)."""
    text = _CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a Markdown file defines: its headings' slugs and explicit HTML anchors."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        out.update(_HTML_ANCHOR.findall(line))
        m = _HEADING.match(line)
        if not m:
            continue
        slug = github_slug(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return frozenset(out)


def links(path: Path) -> list[tuple[int, str]]:
    """The link targets of a Markdown file (outside code), with their line numbers."""
    out: list[tuple[int, str]] = []
    for no, line in _prose_lines(path.read_text(encoding="utf-8")):
        prose = _CODE_SPAN.sub(lambda m: "`" + "x" * len(m.group(2)) + "`", line)
        out.extend((no, m.group(2)) for m in _LINK.finditer(prose))
        ref = _REF_DEF.match(prose)
        if ref:
            out.append((no, ref.group(1)))
    return out


def link_problem(source: Path, target: str) -> str | None:
    """Why ``target`` (a link in ``source``) is broken, or None if it is fine."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
        return None  # http:, https:, mailto: ... are not checked here
    path_part, _, anchor = target.partition("#")
    dest = (source.parent / path_part).resolve() if path_part else source
    if not dest.exists():
        return f"{path_part} does not exist"
    if ROOT not in dest.parents and dest != ROOT:
        return f"{path_part} is outside the repository"
    if anchor:
        if dest.is_dir() or dest.suffix != ".md":
            return f"#{anchor}: only Markdown files have anchors"
        if anchor not in anchors(dest):
            return f"#{anchor} is not a heading or anchor of {_rel(dest)}"
    return None


@cache
def defined_names(path: Path) -> frozenset[str]:
    """The functions and classes a test file defines, at any depth."""
    text = path.read_text(encoding="utf-8")
    return frozenset(re.findall(r"^\s*(?:async\s+def|def|class)\s+(\w+)", text, re.MULTILINE))


def citation_problem(citation: str) -> str | None:
    """Why ``tests/FILE.py::name`` does not name an existing test, or None."""
    file, *names = citation.split("::")
    path = ROOT / file
    if not path.is_file():
        return f"{file} does not exist"
    missing = [n for n in names if n not in defined_names(path)]
    return f"{file} defines no {missing[0]}" if missing else None


def sections(path: Path) -> dict[str, str]:
    """A record's ``## `` sections, by heading, in order."""
    out: dict[str, str] = {}
    current: str | None = None
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if m and len(m.group(1)) == 2:
            current = m.group(2)
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return out


def record_title(path: Path) -> tuple[str, str]:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    m = _RECORD_TITLE.match(first)
    assert m, f"{_rel(path)}: the first line must be '# NNNN. Title', not {first!r}"
    return m.group(1), m.group(2)


# ----------------------------------------------------------------------------- links


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_every_relative_link_points_at_an_existing_file_and_anchor(doc: Path) -> None:
    broken = [f"{_rel(doc)}:{no}: {target}: {why}" for no, target in links(doc)
              if (why := link_problem(doc, target)) is not None]
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_every_cited_test_exists(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    broken = [f"{_rel(doc)}: {c}: {why}" for c in sorted(set(_CITATION.findall(text)))
              if (why := citation_problem(c)) is not None]
    assert not broken, "\n".join(broken)


def test_the_link_checker_catches_what_it_must(tmp_path: Path) -> None:
    # The checks above only mean something if they can fail.
    assert github_slug("Input is checked at `append`") == "input-is-checked-at-append"
    assert github_slug("One protocol, written once: procedures that yield I/O") == (
        "one-protocol-written-once-procedures-that-yield-io")
    assert link_problem(ROOT / "README.md", "docs/no-such-file.md") is not None
    assert link_problem(ROOT / "README.md", "docs/design.md#no-such-heading") is not None
    assert link_problem(ROOT / "README.md", "docs/design.md#the-commit-decision-table") is None
    assert link_problem(ROOT / "README.md", "https://example.com/x.md") is None
    assert citation_problem("tests/test_docs_links.py::no_such_test") is not None
    assert citation_problem("tests/no_such_file.py::test_x") is not None
    assert citation_problem("tests/test_docs_links.py::test_every_cited_test_exists") is None
    doc = tmp_path / "x.md"
    doc.write_text("# Top\n\n```\n[in code](missing.md)\n```\n[a](#top) `[b](missing.md)` [c](gone.md)\n")
    assert [t for _, t in links(doc)] == ["#top", "gone.md"]


# ---------------------------------------------------------------------- decision records


#: Numbers of records folded into their successor before any release (docs/decisions/README.md).
FOLDED = {"0018", "0019", "0021"}


def test_there_are_records_numbered_from_0001_without_gaps() -> None:
    numbers = [record_title(p)[0] for p in RECORDS]
    expected = [f"{i:04d}" for i in range(1, len(RECORDS) + len(FOLDED) + 1)]
    assert numbers == [n for n in expected if n not in FOLDED]
    assert [p.name[:4] for p in RECORDS] == numbers


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.name)
def test_a_record_has_every_section_in_order_and_a_valid_status(record: Path) -> None:
    found = sections(record)
    assert list(found) == SECTIONS, f"{_rel(record)}: sections {list(found)}, expected {SECTIONS}"
    for name in SECTIONS:
        assert found[name].strip(), f"{_rel(record)}: section {name!r} is empty"
    status = found["Status"].strip()
    m = _STATUS.match(status)
    assert m, f"{_rel(record)}: status {status!r} is neither 'Accepted (YYYY-MM-DD)' nor 'Superseded by NNNN'"
    if m.group(2):
        successor = m.group(2)
        assert successor != record.name[:4], f"{_rel(record)} supersedes itself"
        assert any(p.name.startswith(successor + "-") for p in RECORDS), (
            f"{_rel(record)} is superseded by {successor}, which does not exist")


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.name)
def test_a_record_is_proved_by_tests_that_exist(record: Path) -> None:
    proof = sections(record).get("Proved by", "")
    cited = _CITATION.findall(proof)
    assert any("::" in c for c in cited), f"{_rel(record)}: 'Proved by' names no tests/FILE.py::test"
    broken = [f"{c}: {why}" for c in cited if (why := citation_problem(c)) is not None]
    # A bare test name must be defined in a file the section cites.
    files = {ROOT / c.split("::")[0] for c in cited}
    spans = [m.group(2) for m in _CODE_SPAN.finditer(proof)]
    for name in (s for s in spans if re.fullmatch(r"test_\w+", s)):
        if not any(p.is_file() and name in defined_names(p) for p in files):
            broken.append(f"{name}: not defined in any test file the section cites")
    assert not broken, f"{_rel(record)}:\n" + "\n".join(broken)


@pytest.mark.parametrize("doc", [*RECORDS, DECISIONS / "README.md", ROOT / "docs" / "design.md"],
                         ids=lambda p: p.name)
def test_a_record_names_only_what_a_reader_can_read(doc: Path) -> None:
    found = [m.group(0) for m in _UNREADABLE.finditer(doc.read_text(encoding="utf-8"))]
    assert not found, f"{_rel(doc)} refers to {found}: name the code, test or document instead"


def test_the_design_index_lists_every_record_with_its_title_and_status() -> None:
    design = ROOT / "docs" / "design.md"
    rows: dict[str, tuple[str, str, str]] = {}
    for _, line in _prose_lines(design.read_text(encoding="utf-8")):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"\d{4}", cells[0]):
            link = _LINK.search(cells[1])
            assert link, f"docs/design.md: row {cells[0]} has no link to its record"
            rows[cells[0]] = (link.group(1), link.group(2), cells[2])
    assert sorted(rows) == [p.name[:4] for p in RECORDS], "docs/design.md must have one row per record"
    for record in RECORDS:
        number, title = record_title(record)
        text, target, summary = rows[number]
        assert text == title, f"docs/design.md: row {number} says {text!r}, the record's title is {title!r}"
        assert (design.parent / target).resolve() == record.resolve(), f"row {number} links to {target}"
        superseded = sections(record)["Status"].strip().startswith("Superseded")
        assert superseded == summary.startswith("Superseded by"), (
            f"docs/design.md: row {number}'s summary must start with the record's 'Superseded by' (and only then)")


#: The sections design.md had before it became an index: links to them keep working.
FORMER_DESIGN_ANCHORS = [
    "one-protocol-written-once-procedures-that-yield-io", "commit-one-conditional-put-when-small",
    "encoding-each-entry-once", "the-commit-decision-table", "cancellation-of-async-appends",
    "clock-randomness-and-ids-are-injected", "input-is-checked-at-append", "stores-that-ignore-preconditions",
    "conflict-fork-never-merge", "merging-by-levels", "group-commit", "three-stores-one-protocol",
    "listing-newest-first", "atomic-conditional-puts-on-moto", "reading-only-what-is-needed",
    "layers-above-the-log", "signing-inside-a-sans-io-procedure",
]


def test_the_former_anchors_of_design_md_still_resolve() -> None:
    missing = sorted(set(FORMER_DESIGN_ANCHORS) - anchors(ROOT / "docs" / "design.md"))
    assert not missing, f"docs/design.md lost the anchors {missing}"
