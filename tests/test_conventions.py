"""The ecosystem's conventions: a LICENSE and a CHANGELOG that agree with pyproject.toml,
`__version__`, command lines whose --help shows an example, logging instead of bare prints,
and docs whose command lines and links stay inside the repository."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

import nvdd_plugins
from tests.helpers.multiprocess import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
"""The documentation: README and docs/*.md (docs/runs/ holds records of past runs, with the
paths of the machines they ran on, not instructions)."""


def test_license_changelog_and_version_agree_with_pyproject() -> None:
    assert PYPROJECT["license"] == "Apache-2.0"
    license_text = (REPO / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert nvdd_plugins.__version__ == PYPROJECT["version"]
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert "## Unreleased" in changelog and f"## {PYPROJECT['version']}" in changelog


@pytest.mark.parametrize("module", ["nvdd_plugins.validate.__main__", "lammps_interface.cli"])
def test_command_lines_show_examples_in_their_help(module: str, capsys) -> None:
    main = __import__(module, fromlist=["main"]).main
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    prog = re.search(r"usage: (python -m [\w.]+)", text)[1]
    assert "examples:" in text and f"\n  {prog} " in text.split("examples:")[1]


_ALLOWED_PRINTS = {
    "nvdd_plugins/dynamics/hooks.py",  # ThermoLogger's rows are its output
    "nvdd_plugins/validate/__main__.py",  # command lines print their reports
    "lammps_interface/cli.py",
}


def test_library_code_reports_through_logging_not_print() -> None:
    for path in sorted([*REPO.glob("nvdd_plugins/**/*.py"), *REPO.glob("lammps_interface/*.py")]):
        name = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                assert name in _ALLOWED_PRINTS, f"{name}:{node.lineno}: print() in library code"
            if isinstance(node, ast.Attribute) and node.attr == "warn":
                assert getattr(node.value, "id", None) != "warnings", f"{name}:{node.lineno}"
    launchers = (REPO / "docs" / "launchers.md").read_text()
    assert 'logging.getLogger("nvdd_plugins").setLevel' in launchers  # how to turn them down


# -- command lines and links in the docs ---------------------------------------------------
_ALLOWED_OUTSIDE = ("~/.cache/nvdd", "/dev/null")
_REPO_DIRS = ("examples/", "scripts/", "docs/", "tests/", "benchmarks/", "nvdd_plugins/")
_PATH = re.compile(r"(?<![\w.:/~$\-])(~?/[\w.\-]+(?:/[\w.\-*]*)*|\.\./[\w.\-/]*)")
_REPO_PATH = re.compile(
    r"(?<![\w./\-])((?:" + "|".join(_REPO_DIRS) + r"|lammps_interface/)[\w./\-*{}<>]*)"
)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _command_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) of every line of a fenced block and every inline code span."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        found += (
            [(number, line)] if fenced else [(number, s) for s in re.findall(r"`([^`]+)`", line)]
        )
    return found


def outside_paths(text: str) -> list[str]:
    """The paths outside the repository that the command lines of `text` name, and the
    repository paths they name that do not exist, as "line: path"."""
    problems = []
    for number, line in _command_lines(text):
        for path in _PATH.findall(line):
            if not path.startswith(_ALLOWED_OUTSIDE):
                problems.append(f"{number}: {path}")
        for path in _REPO_PATH.findall(line):
            path = path.rstrip(".")
            module = re.sub(r"\.[A-Za-z_]\w*$", ".py", path)  # tests/helpers/oracle.replicated
            placeholder = re.search(r"[<*{]", path)
            if not (placeholder or (REPO / path).exists() or (REPO / module).exists()):
                problems.append(f"{number}: {path} (no such file in the repository)")
    return problems


def test_the_check_finds_paths_outside_the_repository() -> None:
    """Negative control."""
    text = "```bash\ncd <tree>; /work/main/.venv/bin/python scripts/nowhere.py ../shared/x\n```\n"
    assert outside_paths(text) == [
        "2: /work/main/.venv/bin/python",
        "2: ../shared/x",
        "2: scripts/nowhere.py (no such file in the repository)",
    ]
    assert outside_paths("run `python scripts/bit_identity.py dump OUT` in `~/.cache/nvdd`") == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(REPO)))
def test_docs_name_no_path_outside_the_repository(document: Path) -> None:
    text = document.read_text()
    assert outside_paths(text) == []
    for link in _LINK.findall(text):
        target = link.split("#")[0]
        if target and not re.match(r"[a-z]+:", target):
            resolved = (document.parent / target).resolve()
            assert resolved.is_relative_to(REPO) and resolved.exists(), f"link {link}"


def test_the_readme_answers_the_lammps_users_questions() -> None:
    text = (REPO / "README.md").read_text()
    section = text.split("## LAMMPS: coming from mace-torch or SevenNet")[1].split("\n## ")[0]
    routes = ("pair_style mace", "--format=mliap", "e3gnn", "python -m lammps_interface --mace")
    for route in routes:
        assert route in section, route
    assert "PYTHONPATH" in section and "loop geom" in section
    assert (
        "velocity        all create 80 4928459 loop geom"
        in (REPO / "examples" / "lammps" / "in.mpnn").read_text()
    )
