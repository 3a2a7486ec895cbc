"""The import layers: no module imports from a layer above its own, and no two parts import each other.

The layer map is written here once; the README's architecture section shows the same table
(``test_readme_shows_this_layer_table`` keeps the two equal).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

#: One xdist worker runs these, so only one parses every module (imports()).
pytestmark = pytest.mark.xdist_group("layers")

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "draligned"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (  # bottom first: (layer, its parts as module prefixes)
    ("records · hashing · cards · cess estimators",
     ("draligned", "draligned.records", "draligned.hashing", "draligned.strict_json", "draligned.data",
      "draligned.backoff", "draligned.tls", "draligned.lru", "draligned.forked", "draligned.cards", "draligned.harness",
      "draligned.cess")),
    ("archive", ("draligned.archive",)),
    ("models · tools", ("draligned.models", "draligned.tools", "draligned.sandbox")),
    ("executors", ("draligned.executors",)),
    ("study · analysis · evaluator · cess on archives",
     ("draligned.study", "draligned.analysis", "draligned.evaluator", "draligned.cess.archive_runs",
      "draligned.cess.pairs", "draligned.construction")),
    ("demo · report · runner",
     ("draligned.indexing", "draligned.guards", "draligned.runner", "draligned.workers", "draligned.workflow",
      "draligned.audit",
      "draligned.archive_summary", "draligned.demo", "draligned.shards", "draligned.distributed")),
    ("cli", ("draligned.cli",)),
)
"""A module belongs to the part with its longest prefix (``draligned`` itself: the package root only)."""


def part_of(module: str) -> str | None:
    """The part (a prefix of LAYERS) a module belongs to; None when the map does not place it."""
    parts = [p for _, ps in LAYERS for p in ps
             if module == p or (p != "draligned" and module.startswith(p + "."))]
    return max(parts, key=len) if parts else None


def layer_of(part: str) -> int:
    return next(n for n, (_, parts) in enumerate(LAYERS) if part in parts)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    names = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(names)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@dataclass(frozen=True)
class Import:
    """One import statement of a draligned module naming another draligned module."""

    path: Path
    line: int
    importer: str
    imported: str


def _resolve(importer: str, path: Path, node: ast.ImportFrom) -> list[str]:
    """The draligned modules an ``from X import a, b`` names (a submodule when a or b is one)."""
    base = node.module or ""
    if node.level:
        package = importer.split(".") if path.name == "__init__.py" else importer.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([base] if base else []))
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    return subs if subs and len(subs) == len(node.names) else [base, *subs]


@functools.cache
def imports() -> list[Import]:
    """Every import of every module, at any depth (functions, ``TYPE_CHECKING`` blocks included). Parsed
    when a test first asks, not at collection (every xdist worker collects; ~0.7 CPU-s)."""
    out = []
    for importer, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = _resolve(importer, path, node)
            else:
                continue
            out += [Import(path, node.lineno, importer, n) for n in names
                    if n == "draligned" or n.startswith("draligned.")]
    return out


def test_every_module_has_a_layer():
    assert [m for m in MODULES if part_of(m) is None] == []


def test_no_module_imports_from_a_higher_layer():
    bad = []
    for imp in imports():
        src, dst = part_of(imp.importer), part_of(imp.imported)
        assert src is not None and dst is not None, imp
        if layer_of(dst) > layer_of(src):
            bad.append(f"{imp.path.relative_to(ROOT)}:{imp.line}: {imp.importer} (layer '{LAYERS[layer_of(src)][0]}') "
                       f"imports {imp.imported} (higher layer '{LAYERS[layer_of(dst)][0]}')")
    assert bad == [], "\n".join(bad)


def test_the_model_registry_names_only_modules_of_its_layer_or_below():
    from draligned.models.base import PROTOCOLS

    models = layer_of("draligned.models")
    above = {name: target for name, target in PROTOCOLS.items()
             if layer_of(part_of(target.split(":")[0]) or "draligned.cli") > models}
    assert above == {}, "register these where their layer lives and pass that registry to get_model"


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_between_parts():
    edges: dict[str, set[str]] = {}
    where: dict[tuple[str, str], Import] = {}
    for imp in imports():
        src, dst = part_of(imp.importer), part_of(imp.imported)
        if src != dst and src is not None and dst is not None:
            edges.setdefault(src, set()).add(dst)
            where.setdefault((src, dst), imp)
    cycle = _cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle) + "".join(
        f"\n  {where[a, b].path.relative_to(ROOT)}:{where[a, b].line}: {where[a, b].importer} imports "
        f"{where[a, b].imported}" for a, b in zip(cycle, cycle[1:], strict=False))


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None


@pytest.mark.parametrize(("importer", "line", "target"), [
    ("draligned.evaluator.reading", "from draligned.archive.store import Archive", "draligned.archive.store"),
    ("draligned.evaluator.reading", "from . import storage", "draligned.evaluator.storage"),
    ("draligned.archive.index", "from draligned import indexing", "draligned.indexing"),
    ("draligned.archive", "from .store import Archive", "draligned.archive.store"),
])
def test_imports_resolve_to_the_module_they_name(importer, line, target):
    node = ast.parse(line).body[0]
    assert isinstance(node, ast.ImportFrom)
    assert target in _resolve(importer, MODULES[importer], node)


def render_table() -> str:
    """The layer table of the README (top layer first)."""
    rows = ["| # | Layer | Modules (`draligned.`…) | May import |", "|---|---|---|---|"]
    for n, (name, parts) in reversed(list(enumerate(LAYERS))):
        mods = ", ".join("the package root" if p == "draligned" else f"`{p.removeprefix('draligned.')}`"
                         for p in parts)
        may = "its own layer" if n == 0 else f"layer{'s 0–' if n > 1 else ' '}{n - 1} and its own"
        rows.append(f"| {n} | {name} | {mods} | {may} |")
    return "\n".join(rows) + "\n"


def test_readme_shows_this_layer_table():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert render_table() in readme, "README.md's layer table differs from tests/test_layers.py:\n" + render_table()
