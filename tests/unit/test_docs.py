"""README.md and docs/*.md (issue 33 #6): every relative link and `#anchor` leads somewhere (GitHub's heading anchors,
or an `<a id>`), the README links every page of docs/, and its two commands are the ones a newcomer copies: the
install-and-demo line and the test command that `.ci/run` runs verbatim."""

from __future__ import annotations

import re
from pathlib import Path

from paths import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks, each block blanked line for line (so line numbers stay right)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file: one per heading (lower case, punctuation but `-` and `_` dropped,
    spaces as `-`, a repeated one numbered `-1`, `-2`, ...), and every `<a id="...">`."""
    text = _prose(path.read_text(encoding="utf-8"))
    found = set(re.findall(r'<a (?:id|name)="([^"]+)"', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link in a heading counts by its text
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(path: Path) -> list[str]:
    """`FILE:LINE: target: why` for each relative link of a Markdown file that leads nowhere: a missing file, or an
    anchor its page does not have. Links with a scheme (https:, mailto:) are not followed."""
    problems = []
    for number, line in enumerate(_prose(path.read_text(encoding="utf-8")).splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue
            file_part, _, anchor = target.partition("#")
            page = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{number}: {target}"
            if not page.exists():
                problems.append(f"{where}: no such file {page}")
            elif anchor and page.suffix != ".md":
                problems.append(f"{where}: an anchor into a file that is not Markdown")
            elif anchor and anchor not in anchors(page):
                problems.append(f"{where}: {page.name} has no heading or <a id> with that anchor")
    return problems


def test_every_link_and_anchor_of_the_readme_and_docs_leads_somewhere() -> None:
    assert len(PAGES) > 1
    problems = [problem for page in PAGES for problem in broken_links(page)]
    assert not problems, "\n".join(problems)


def test_a_missing_file_or_anchor_is_named_with_its_line(tmp_path: Path) -> None:
    """The check above fails on what it is there for: a link to a file that is not there, or to a heading that was
    renamed or moved to another page."""
    (tmp_path / "other.md").write_text("# Other page\n\n## `[sweep]`: defaults\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[fine](other.md#sweep-defaults) [fine too](#page)\n"
                    "```\n[in a code block](gone.md)\n```\n"
                    "[gone](gone.md) and [moved](other.md#profilesname)\n[here](#nowhere) [web](https://x.invalid/a)\n",
                    encoding="utf-8")
    problems = broken_links(page)
    assert [p.split(": ", 1)[0].rsplit(":", 1)[1] for p in problems] == ["7", "7", "8"], problems
    assert "gone.md: no such file" in problems[0]
    assert "other.md#profilesname: other.md has no heading" in problems[1]
    assert "#nowhere: page.md has no heading" in problems[2]


def test_repeated_headings_get_numbered_anchors_as_on_github(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# specmon\n## Errors\n### Errors\n## `specmon sweep` [options](x.md)\n", encoding="utf-8")
    assert anchors(page) == {"specmon", "errors", "errors-1", "specmon-sweep-options"}


def test_the_readme_links_every_page_of_docs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for target in LINK.findall(_prose(readme))}
    assert {f"docs/{page.name}" for page in PAGES[1:]} <= linked


def test_the_readme_has_two_commands_and_ci_runs_its_test_command() -> None:
    """A newcomer copies two commands: one installs specmon and runs the demo on the embedded default, one runs the
    tests. `.ci/run` runs the second one as it is written (its last line), so the two cannot drift apart."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    demo, tests = re.findall(r"^```sh\n(.*?)\n```", readme, re.S | re.M)
    assert demo == "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/specmon demo"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").rstrip("\n").splitlines()
    assert tests == ci[-1] == "pip install -e '.[test]' && python3 -m pytest -q"
