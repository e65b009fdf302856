"""The README is a landing page: short, the two commands on its first screen, and every link it or the docs
index makes lands on a file and heading that exist."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FIRST_SCREEN = 25  # lines a terminal or a repository page shows before scrolling


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set:
    return {_slug(line.lstrip("#")) for line in page.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")}


def test_the_readme_reads_in_three_minutes():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 120, f"README.md has {len(lines)} lines: details belong in docs/"
    first = "\n".join(lines[:FIRST_SCREEN])
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert command in first, f"{command!r} is not on the README's first screen"
    assert "CUDA" in first and "emulated" in first, "the CUDA status is not said on the first screen"


@pytest.mark.parametrize("page", ["README.md", "docs/index.md", "CHANGELOG.md"])
def test_every_link_lands(page):
    source = ROOT / page
    broken = []
    for target in LINK.findall(source.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.name}")
    assert not broken, f"{page}: " + "; ".join(broken)


def test_the_license_and_changelog_are_there():
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").startswith("# Changelog")
