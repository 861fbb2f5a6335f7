"""No function in the library takes more than 8 parameters (`self` and `cls` aside): a
longer list is a sign that some of them belong together in a value."""

from __future__ import annotations

import ast

from tests.helpers.multiprocess import REPO

MAX_PARAMETERS = 8
ROOTS = ("nvdd_plugins", "lammps_interface")


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments = function.args
    every = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
    names = [argument.arg for argument in every]
    names += [a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return [name for name in names if name not in ("self", "cls")]


def _too_long() -> list[str]:
    found = []
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    count = len(_parameters(node))
                    if count > MAX_PARAMETERS:
                        where = f"{path.relative_to(REPO)}:{node.lineno}"
                        found.append(f"{where} {node.name} ({count})")
    return found


def test_no_function_takes_more_than_eight_parameters() -> None:
    too_long = _too_long()
    assert not too_long, "\n".join(too_long)
