"""The documentation: a README a first visit can read, a CLI reference that says what the CLI says, and
pages that link to each other (the strict site build, scripts/test, catches broken links and anchors)."""

from __future__ import annotations

import re
from pathlib import Path

from support.loading import script

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_is_what_a_first_visit_needs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.split("\n")) <= 250
    assert "bash scripts/setup-dev && .venv/bin/plateau sweep" in readme and "bash scripts/test" in readme


def test_every_page_the_readme_links_to_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(((?:docs/)[^)#]+)", readme)
    assert len(links) >= 10
    assert all((ROOT / link).exists() for link in links), [link for link in links if not (ROOT / link).exists()]


def test_every_docs_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")]
    assert pages and all(f": {page}" in nav for page in pages), [p for p in pages if f": {p}" not in nav]


def test_the_cli_reference_is_what_the_cli_says() -> None:
    module = script("scripts/cli_reference.py")
    current = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert current == module.page(), "docs/reference/cli.md is stale: run .venv/bin/python scripts/cli_reference.py"
    for command in ("run", "sweep", "sim", "serve-sim", "diagnose", "report", "compare", "roofline", "import",
                    "calibrate", "predict", "plan", "tune"):
        assert f"## `plateau {command}`" in current
