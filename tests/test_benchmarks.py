"""The benchmarks name only what exists: every name a script imports from draligned (or tests) and every
attribute it reads from such a module resolves. They are run by hand, not by the suite, so a rename in
the library broke one unseen (``bench_memory.py`` read ``runner.refresh`` after it had moved to
``draligned.indexing``). Nothing is timed or run here."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests.study_helpers import REPO

#: The worker that imports every draligned module for test_models_strict: these imports cost it nothing.
pytestmark = pytest.mark.xdist_group("models_strict")

OURS = ("draligned", "tests")
"""The packages whose names a benchmark may get wrong after a change here."""


def references(source: str) -> list[tuple[int, str, str]]:
    """(line, module, name) for each name a script takes from one of OURS: ``from M import N`` gives N of M
    (and ``N.X`` gives X of ``M.N`` when that is a module), ``import M.S as A`` gives S of M and ``A.X`` X of
    M.S. The code a script hands to another interpreter as a string is read the same way."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
            found += [(node.lineno, node.module, a.name) for a in node.names]
            aliases |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in OURS and a.asname:
                    found.append((node.lineno, *a.name.rsplit(".", 1)))
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "draligned" in node.value:
            try:
                found += references(node.value)
            except SyntaxError:  # text, not code
                pass
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            found.append((node.lineno, aliases[node.value.id], node.attr))
    return found


def missing(module: str, name: str) -> bool:
    """Whether ``module`` has no attribute ``name`` and no submodule of that name (False when ``module`` is
    not a module: a class or function a script took by name, whose own name was checked)."""
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError:
        return False
    if hasattr(found, name):
        return False
    try:
        importlib.import_module(f"{module}.{name}")
    except ModuleNotFoundError:
        return True
    return False


SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_name_a_benchmark_takes_from_draligned_exists(script: Path) -> None:
    broken = [f"{script.name}:{line}: {module}.{name}"
              for line, module, name in references(script.read_text(encoding="utf-8")) if missing(module, name)]
    assert broken == []


def test_a_renamed_function_is_found() -> None:
    source = ("import draligned.runner as runner\nimport draligned.gone as gone\n"
              "from draligned.indexing import refresh, nowhere\nfrom draligned.cess import parquet\n"
              "runner.refresh\nparquet.NoChecks\n"
              "CODE = 'from draligned.cess import parquet_lines; parquet_lines._lost'\n")
    assert sorted((m, n) for _, m, n in references(source) if missing(m, n)) == [
        ("draligned", "gone"), ("draligned.cess.parquet", "NoChecks"), ("draligned.cess.parquet_lines", "_lost"),
        ("draligned.indexing", "nowhere"), ("draligned.runner", "refresh")]
