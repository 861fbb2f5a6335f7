"""Every ```python block in README.md and docs/*.md runs as written.

The rules, for every block added later:

* A ```python block is a complete script. It runs in a fresh Python process (one rank, the
  working directory a temporary one, the repository importable) and must exit with 0.
* `<!-- snippet: ranks=2 -->` on the line just above the fence: the block needs ranks; it
  runs under `mpirun -n 2 python -m mpi4py` instead.
* `<!-- snippet: fragment: WHY -->` on the line just above the fence: the block is
  deliberately not a script (it shows lines of a class, stands for the reader's own model,
  continues an earlier block, or needs a GPU, a trained model or a package CI lacks). It is
  only compiled, and WHY must say what it lacks.
* `<!-- snippet: walkthrough: NAME -->` on the line just above the fence: the block is a
  file of one of the README's first-run journeys, saved as NAME and run, as a user types
  the journey's commands, by `tests/test_walkthrough.py`; here it is only compiled.
* A marker line anywhere else (not just above a ```python fence) fails the test; blocks of
  any other language (```bash, plain ```) are not run.

The models table in README.md names each wrapper's parameters: they are checked against the
wrapper's signature.
"""

from __future__ import annotations

import inspect
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

import nvdd_plugins.models
from tests.helpers.multiprocess import REPO, run_command, run_mpi

pytestmark = pytest.mark.multiprocess

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- snippet: (ranks=2|fragment|walkthrough)(?::\s*(.*?))?\s*-->")


@dataclass(frozen=True)
class Snippet:
    """One ```python block: where it is, its code and its marker ("" when unmarked)."""

    document: Path
    line: int
    code: str
    marker: str
    why: str

    @property
    def name(self) -> str:
        """`README.md:86`: the document and the line of the opening fence."""
        return f"{self.document.relative_to(REPO)}:{self.line}"


def _snippets(document: Path) -> list[Snippet]:
    lines = document.read_text().splitlines()
    snippets = []
    for index, line in enumerate(lines):
        if line.strip() != "```python":
            continue
        end = next((j for j in range(index + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{document.relative_to(REPO)}:{index + 1}: unclosed ```python")
        marker = MARKER.fullmatch(lines[index - 1].strip()) if index else None
        code = textwrap.dedent("\n".join(lines[index + 1 : end])) + "\n"
        kind, why = (marker.group(1), marker.group(2) or "") if marker else ("", "")
        snippets.append(Snippet(document, index + 1, code, kind, why))
    return snippets


SNIPPETS = [snippet for document in DOCUMENTS for snippet in _snippets(document)]
RUNNABLE = [s for s in SNIPPETS if s.marker not in ("fragment", "walkthrough")]
FRAGMENTS = [s for s in SNIPPETS if s.marker in ("fragment", "walkthrough")]


@pytest.mark.parametrize("snippet", RUNNABLE, ids=[s.name for s in RUNNABLE])
def test_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code)
    if snippet.marker == "ranks=2":
        run_mpi(2, script, timeout=120, cwd=tmp_path)
    else:
        code, output = run_command([sys.executable, str(script)], tmp_path, 120)
        assert code == 0, f"{snippet.name} exited {code}:\n{output}"


def test_fragments_compile_and_say_why() -> None:
    for snippet in FRAGMENTS:
        compile(snippet.code, snippet.name, "exec")
        assert snippet.why, f"{snippet.name}: a {snippet.marker} marker must say why (its file)"
    print("\n".join(f"{s.name}: {s.why}" for s in FRAGMENTS))


def test_every_marker_sits_just_above_a_python_block() -> None:
    for document in DOCUMENTS:
        lines = document.read_text().splitlines()
        for index, line in enumerate(lines):
            if line.strip().startswith("<!-- snippet:"):
                where = f"{document.relative_to(REPO)}:{index + 1}"
                assert MARKER.fullmatch(line.strip()), f"{where}: unknown marker {line!r}"
                following = lines[index + 1].strip() if index + 1 < len(lines) else ""
                assert following == "```python", f"{where}: no ```python fence below it"


def test_models_table_names_real_parameters() -> None:
    text = (REPO / "README.md").read_text()
    table = text.split("## Supported models")[1].split("\n\n")[1]
    calls = re.findall(r"`(\w+)\(([^)]*)\)`", table)
    assert len(calls) >= 5, table
    for name, arguments in calls:
        parameters = inspect.signature(getattr(nvdd_plugins.models, name)).parameters
        for argument in filter(None, (a.split("=")[0].strip() for a in arguments.split(","))):
            assert argument in parameters, f"{name}({arguments}): {name} has no {argument!r}"
