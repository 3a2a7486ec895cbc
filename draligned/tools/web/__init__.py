"""Live web acquisition: search providers (Tavily, Brave, SearXNG, Exa), the http reader and the
acquisition store that makes a study's web one web for all its runs (issue 15).

Provider modules import their SDKs (``tavily-python``, ``exa-py``) or ``httpx``; like the model
protocols, each is imported only when a study uses it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from draligned.tools.search_spec import SearchSpec

if TYPE_CHECKING:  # both import httpx, which a study without a web backend never needs (its workers neither)
    from draligned.tools.web.backend import StudyWeb
    from draligned.tools.web.provider import Provider

#: backend name -> "module:Class"; imported only when a study uses the backend.
PROVIDERS: dict[str, str] = {
    "tavily": "draligned.tools.web.tavily:Tavily",
    "brave": "draligned.tools.web.brave:Brave",
    "searxng": "draligned.tools.web.searxng:SearXNG",
    "exa": "draligned.tools.web.exa:Exa",
}


class WebConfigError(ValueError):
    """A web backend that cannot be used; ``field`` names the ``[search]`` field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def provider_class(backend: str) -> type[Provider]:
    """The provider class of a backend, importing its module (and SDK) only now."""
    module_name, cls_name = PROVIDERS[backend].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise WebConfigError("backend", f"backend {backend!r} needs a package that is not installed "
                                        f"({exc.name})") from exc
    cls: type[Provider] = getattr(module, cls_name)
    return cls


def open_web(spec: SearchSpec, store_root: Path) -> StudyWeb:
    """The study's web: its provider (with the key from the environment unless replaying read-only) and the
    acquisition store at ``store_root`` in the spec's mode. A missing key is a :class:`WebConfigError`."""
    from draligned.tools.web.backend import StudyWeb
    from draligned.tools.web.store import AcquisitionStore

    key = None
    if spec.cache != "read-only" and (env := spec.key_env) is not None:
        key = os.environ.get(env)
        if not key:
            raise WebConfigError("api_key_env", f"environment variable {env} is not set; it must hold the "
                                                f"{spec.backend} API key (a read-only replay needs none)")
    store = None if spec.cache == "off" else AcquisitionStore(store_root, spec.cache)
    return StudyWeb(spec, provider_class(spec.backend)(spec, key), store)
