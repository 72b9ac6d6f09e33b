"""The README is the front door and docs/ holds the reference: docs/spec.md names every spec key,
docs/cli.md every command and command-line flag, the README keeps the test command CI runs and
links every docs page, every relative link in README.md and docs/*.md leads to something that
exists, and the README stays short."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from helpers import ROOT
from onnx_parity.cli.main import build_parser
from onnx_parity.spec import spec_schema

DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text(encoding="utf-8")
SPEC_DOC = (DOCS / "spec.md").read_text(encoding="utf-8")
CLI_DOC = (DOCS / "cli.md").read_text(encoding="utf-8")
CI_SCRIPT = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 250

# [text](target) and ![alt](target), with an optional "title"; fenced code is left out first.
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def _keys(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        found |= set(node.get("properties", {}))
        for value in node.values():
            found |= _keys(value)
    elif isinstance(node, list):
        for value in node:
            found |= _keys(value)
    return found


def test_every_spec_key_is_documented() -> None:
    assert "\n## Spec reference\n" in SPEC_DOC, "docs/spec.md has no '## Spec reference' section"
    section = SPEC_DOC.split("\n## Spec reference\n", 1)[1].split("\n## ", 1)[0]
    missing = sorted(k for k in _keys(spec_schema()) if f"`{k}`" not in section)
    assert not missing, f"docs/spec.md's spec reference does not mention {missing}"


def test_every_command_line_flag_is_documented() -> None:
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    flags = {option for sub in subcommands.values() for action in sub._actions
             for option in action.option_strings if option.startswith("--")} - {"--help"}
    missing = sorted(f for f in flags if f"`{f}" not in CLI_DOC)
    assert not missing, f"docs/cli.md does not document {missing}"
    for name in subcommands:
        assert f"onnx-parity {name}" in CLI_DOC, f"docs/cli.md does not document `{name}`"


def test_the_usage_lists_every_flag_of_each_command() -> None:
    """docs/cli.md's usage block, command by command, names the parser's flags and no others."""
    usage = CLI_DOC.split("```text\n", 1)[1].split("```", 1)[0]
    blocks = re.split(r"^onnx-parity (?=\w)", usage, flags=re.M)[1:]
    documented = {block.split()[0]: set(re.findall(r"\[(-[-\w]+)", block)) for block in blocks}
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    assert set(documented) == set(subcommands)
    for name, sub in subcommands.items():
        flags = {action.option_strings[0] for action in sub._actions
                 if action.option_strings and action.option_strings[0] != "-h"}
        assert documented[name] == flags, f"onnx-parity {name}: usage in docs/cli.md"


def test_ci_runs_the_readme_test_command() -> None:
    command = re.search(r"test command.*?```bash\n(.+?)\n```", README, re.S)
    assert command is not None
    assert command.group(1).strip() in CI_SCRIPT.splitlines()


def _relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [target for target in LINK.findall(text)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I)  # http:, https:, mailto:
            and not target.startswith("#")]


def test_every_relative_link_leads_to_a_file() -> None:
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in PAGES
              for target in _relative_links(page)
              if not (page.parent / target.split("#", 1)[0]).exists()]
    assert not broken, f"links to nothing: {broken}"


def test_the_link_checker_sees_links() -> None:
    """The regex must find the README's own links, or the test above proves nothing."""
    found = _relative_links(ROOT / "README.md")
    assert "docs/failing-check.png" in found and "docs/spec.md" in found


def test_the_readme_links_every_docs_page() -> None:
    linked = {target.split("#", 1)[0] for target in _relative_links(ROOT / "README.md")}
    missing = sorted(p.relative_to(ROOT).as_posix() for p in DOCS.glob("*.md")
                     if p.relative_to(ROOT).as_posix() not in linked)
    assert not missing, f"README.md does not link {missing}"


def test_the_readme_stays_short() -> None:
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; move reference material into docs/ "
        f"(at most {README_MAX_LINES})")
