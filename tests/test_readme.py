"""The README is the front door: it must name every spec key and every command-line flag."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from onnx_parity.cli import build_parser
from onnx_parity.spec import spec_schema

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
CI_SCRIPT = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()


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
    section = README.split("### Spec reference", 1)[1].split("\n## ", 1)[0]
    missing = sorted(k for k in _keys(spec_schema()) if f"`{k}`" not in section)
    assert not missing, f"README's spec reference does not mention {missing}"


def test_every_command_line_flag_is_documented() -> None:
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    flags = {option for sub in subcommands.values() for action in sub._actions
             for option in action.option_strings if option.startswith("--")} - {"--help"}
    missing = sorted(f for f in flags if f"`{f}" not in README)
    assert not missing, f"README does not document {missing}"
    for name in subcommands:
        assert f"onnx-parity {name}" in README


def test_ci_runs_the_readme_test_command() -> None:
    command = re.search(r"test command.*?```bash\n(.+?)\n```", README, re.S)
    assert command is not None
    assert command.group(1).strip() in CI_SCRIPT.splitlines()
