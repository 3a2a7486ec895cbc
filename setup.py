"""The optional compiled parts: the walk of ``draligned.cess.line_chunk`` (``draligned/cess/_line_walk.cpp``) and
the kernels of the columns path (``draligned/cess/_kernels.cpp``, the standard library and the Dragonbox header in
``third_party/dragonbox``: the writer of
``draligned.cess.json_lines``, the probability sums of ``draligned.cess.parquet_batch``, the check of a
``flat-2`` batch of ``draligned.cess.parquet_flat``).

The walk includes the simdjson sources that pysimdjson ships in its package directory (pysimdjson is in
[build-system] requires, so an isolated build has them). ``optional=True``: without a compiler, or without
pysimdjson in the build environment, the package installs without it and loads JSON Lines in Python as before
(and without the kernels, DuckDB writes the lines and numpy sums the probabilities and checks the batches).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import Extension, setup


def _simdjson_dir() -> str | None:
    """The directory holding pysimdjson's simdjson.h and simdjson.cpp, if it is installed."""
    spec = importlib.util.find_spec("simdjson")
    if spec is None or spec.origin is None:
        return None
    where = Path(spec.origin).parent
    return str(where) if (where / "simdjson.cpp").is_file() and (where / "simdjson.h").is_file() else None


_where = _simdjson_dir()
_kernels = Extension("draligned.cess._kernels", ["draligned/cess/_kernels.cpp"], language="c++",
                     include_dirs=["third_party/dragonbox"], depends=["third_party/dragonbox/dragonbox.h"],
                     extra_compile_args=["-std=c++17", "-O2"], optional=True)
setup(ext_modules=[_kernels] if _where is None else [
    Extension("draligned.cess._line_walk", ["draligned/cess/_line_walk.cpp"], include_dirs=[_where],
              language="c++", extra_compile_args=["-std=c++17", "-O2"], optional=True), _kernels])
