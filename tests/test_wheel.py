"""The wheel ships every file the code loads: each top-level data folder byte for byte, and every module.

The build runs setuptools' ``build_py`` (the tree ``bdist_wheel`` zips as it is) on a copy of the checkout,
offline; CI also builds the real wheel, installs it and runs the demo outside the checkout (.ci/run).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

#: One xdist worker runs these, so the package tree (``built``) is built once, not once in each worker.
pytestmark = pytest.mark.xdist_group("wheel")

REPO = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
FOLDERS = {package.removeprefix("draligned.data."): folder for package, folder in SETUPTOOLS["package-dir"].items()}
"""Installed folder name under draligned/data -> the checkout's top-level folder."""


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path (compiled bytecode left out)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package tree the wheel holds, built from a copy of the checkout (a build in place would leave
    build/ behind, whose stale files a later build would pack)."""
    src, lib = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("lib")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for folder in ("draligned", *FOLDERS.values()):
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-W", "ignore", "-c", "from setuptools import setup; setup()", "-q",
                    "build_py", "--build-lib", str(lib)], cwd=src, check=True, capture_output=True)
    return lib / "draligned"


def test_every_data_folder_ships_byte_for_byte(built: Path) -> None:
    for installed, folder in FOLDERS.items():
        assert _files(built / "data" / installed) == _files(REPO / folder), folder


EXTENSION = (".cpp", ".so")
"""The optional compiled extension's source and in-place build: build_ext (not build_py) compiles the one into
the other in the wheel (setup.py)."""


def test_every_module_ships(built: Path) -> None:
    shipped = {k: v for k, v in _files(built).items() if not k.startswith("data/") or k == "data/__init__.py"}
    assert shipped == {k: v for k, v in _files(REPO / "draligned").items() if not k.endswith(EXTENSION)}


def test_every_folder_the_code_loads_is_shipped() -> None:
    named = {m for p in (REPO / "draligned").rglob("*.py")
             for m in re.findall(r'data_dir\("([^"]+)"\)', p.read_text(encoding="utf-8"))}
    assert named and named <= FOLDERS.keys()
    assert all(installed == folder for installed, folder in FOLDERS.items())  # same name in both layouts


def test_the_installed_demo_study_resolves_inside_the_package(built: Path, tmp_path: Path) -> None:
    """From the built tree alone, in a directory outside the checkout, the bundled studies find their cards,
    contracts, corpus and pools inside the package (their relative paths hold in both layouts)."""
    code = ("from draligned.demo import DEMO_POOL_STUDY, DEMO_STUDY\nfrom draligned.study import load_study\n"
            "for path in (DEMO_STUDY, DEMO_POOL_STUDY):\n    s = load_study(path)\n"
            "    print(*[c.path for c in s.cards], *[c.path for c in s.contracts.values()], s.corpus_path or '',"
            " *s.pool_paths.values(), sep='\\n')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(built.parent)},
                         check=True, capture_output=True, text=True).stdout
    paths = [Path(line).resolve() for line in out.splitlines() if line]
    assert len(paths) == (4 + 3 + 1) + (2 + 1 + 2)  # demo: cards, contracts, corpus; pool: cards, contract, pools
    assert all(p.is_relative_to(built.resolve() / "data") and p.is_file() for p in paths)
