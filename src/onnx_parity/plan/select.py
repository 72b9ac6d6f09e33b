"""Which cases a run checks: `--select` globs on the case id and `--targets` names."""

from __future__ import annotations

import fnmatch
from collections.abc import Collection

from onnx_parity.escape import visible
from onnx_parity.frozen import frozen


@frozen
class Selection:
    """The cases of a run: those whose id matches any of `globs` and whose target is one of
    `targets`; an empty tuple does not narrow."""

    globs: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()

    def matches(self, case_id: str, target: str) -> bool:
        """Whether the case with this id, on the target of this name, is selected. The same
        question is asked of the cases a baseline report holds, which the spec may no longer
        plan: so it takes the id and the target's name, never a planned case."""
        return self._takes_id(case_id) and (not self.targets or target in self.targets)

    def problem(self, spec_targets: Collection[str]) -> str | None:
        """What is wrong with this selection for a spec with these targets: a `--targets` name
        the spec lacks, which would otherwise select nothing without a word."""
        unknown = [name for name in self.targets if name not in spec_targets]
        if not unknown:
            return None
        return (f"--targets: no target named {', '.join(map(visible, unknown))}; "
                f"the spec has {', '.join(spec_targets)}")

    def describe(self) -> str:
        """` matching GLOB, … on TARGET, …` for a message; empty when nothing narrows."""
        text = f" matching {', '.join(map(visible, self.globs))}" if self.globs else ""
        if self.targets:
            text += f" on {', '.join(map(visible, self.targets))}"
        return text

    def _takes_id(self, case_id: str) -> bool:
        return not self.globs or any(fnmatch.fnmatchcase(case_id, literal_brackets(glob))
                                     for glob in self.globs)


EVERYTHING = Selection()


def literal_brackets(glob: str) -> str:
    """Case ids contain brackets, so `[` and `]` match themselves; `*` and `?` still glob."""
    return "".join("[[]" if ch == "[" else "[]]" if ch == "]" else ch for ch in glob)
