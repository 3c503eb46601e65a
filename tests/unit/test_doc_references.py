"""Every reference from template.yaml and the code to a section of README.md or docs/ names one that exists: a
`docs/<page>.md#<anchor>` must be the GitHub anchor of one of the page's headings, a `docs/<page>.md "Section"` (or
`README "Section"`) the title of a heading or of a paragraph's bold lead (`**Section.**`). A section renamed or moved
to another page fails here instead of leaving a comment that points nowhere. And every test the docs cite as the
proof of a claim (`test_...`) exists, as a test function or a test module."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import ROOT

SOURCE_SUFFIXES = {".py", ".yaml", ".yml", ".sh", ".toml", ".json", ".cfg"}
SOURCE_NAMES = {"Makefile"}
# Pages referenced as a file, then either #anchor or a quoted section title (after optional punctuation).
REFERENCE = re.compile(
    r"(?P<page>\bREADME(?:\.md)?|\bdocs/[\w.-]+\.md)"
    r"(?:#(?P<anchor>[\w-]+)|[ \t]*[,(]?[ \t]*\"(?P<section>[^\"\s][^\"]{0,79})\")?"
)
HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*#*\s*$", re.M)
BOLD_LEAD = re.compile(r"^\*\*(?P<text>[^*]+?)\*\*", re.M)


def sources() -> list[Path]:
    """Tracked files outside tests/ and docs/ that can hold a reference: template.yaml, the code, Makefiles."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    paths = [ROOT / line for line in listed.splitlines()]
    return [
        path
        for path in paths
        if path.parts[len(ROOT.parts)] not in ("tests", "docs")
        and (path.suffix in SOURCE_SUFFIXES or path.name in SOURCE_NAMES)
        and path.is_file()
    ]


def joined(text: str) -> str:
    """The text with comment and docstring line breaks joined, so a section title split over two lines is whole."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#[ \t]*)?", " ", text)


def plain(markdown: str) -> str:
    """A heading's text as GitHub renders it: links as their text, no code or emphasis marks."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    return re.sub(r"[`*_]", "", text).strip()


def github_anchor(text: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped except - and _, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", plain(text).lower()).replace(" ", "-")


@cache
def page_sections(page: str) -> tuple[frozenset[str], frozenset[str]]:
    """The page's heading anchors (GitHub numbers repeats: -1, -2), and its section titles' anchors (headings and
    bold paragraph leads)."""
    text = (ROOT / page).read_text()
    anchors: list[str] = []
    for match in HEADING.finditer(re.sub(r"```.*?```", "", text, flags=re.S)):
        anchor = github_anchor(match["text"])
        repeats = anchors.count(anchor) + sum(1 for a in anchors if a.startswith(f"{anchor}-") and a[-1].isdigit())
        anchors.append(anchor if not repeats else f"{anchor}-{repeats}")
    leads = {github_anchor(match["text"].rstrip(".:")) for match in BOLD_LEAD.finditer(text)}
    return frozenset(anchors), frozenset(anchors) | frozenset(leads)


def references() -> list[tuple[str, str, str | None, str | None]]:
    found = []
    for path in sources():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for match in REFERENCE.finditer(joined(text)):
            page = "README.md" if match["page"].startswith("README") else match["page"]
            if "github.com" in joined(text)[max(0, match.start() - 80) : match.start()]:
                continue  # another project's README
            found.append((str(path.relative_to(ROOT)), page, match["anchor"], match["section"]))
    return found


REFERENCES = references()


def test_the_scan_finds_the_references_it_checks():
    # Given the sources / Then references of every form are found, so the checks below cannot pass on nothing
    assert any(anchor for _, _, anchor, _ in REFERENCES)
    assert any(section for _, _, _, section in REFERENCES)
    assert any(source == "template.yaml" for source, *_ in REFERENCES)


def test_github_anchors_follow_githubs_rules():
    assert github_anchor("SnapStart (optional, off)") == "snapstart-optional-off"
    assert github_anchor("Why `AuthType: NONE`") == "why-authtype-none"
    assert github_anchor("Deploying from [GitHub](https://github.com) Actions") == "deploying-from-github-actions"


@pytest.mark.parametrize(
    ("source", "page", "anchor", "section"), REFERENCES, ids=[f"{r[0]}->{r[1]}" for r in REFERENCES]
)
def test_every_referenced_page_and_section_exists(source, page, anchor, section):
    # Given a reference in the source / Then its page exists, and its anchor or section title is one of the page's
    assert (ROOT / page).is_file(), f"{source} references {page}, which does not exist"
    anchors, titles = page_sections(page)
    if anchor is not None:
        assert anchor in anchors, f"{source} references {page}#{anchor}: no such heading"
    if section is not None:
        assert github_anchor(section) in titles, f'{source} references {page} "{section}": no such section'


TEST_NAME = re.compile(r"\btest_[a-z0-9_]+")


def test_every_test_the_docs_cite_exists():
    # Given every test module and test function of the suite
    modules = list((ROOT / "tests").rglob("test_*.py"))
    defined = {path.stem for path in modules}
    defined |= {name for path in modules for name in re.findall(r"def (test_\w+)", path.read_text())}
    # When the docs and the README name a test as the proof of a claim
    cited = {
        (page.relative_to(ROOT).as_posix(), name)
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for name in TEST_NAME.findall(page.read_text())
    }
    assert len(cited) > 50
    # Then each is one (a renamed or removed test fails here, not in a reader's search)
    assert sorted((page, name) for page, name in cited if name not in defined) == []
