"""One verifying TLS context per process for every HTTP client: the model SDKs' transports, the web
providers' clients and the page reader.

Building a context loads the whole CA bundle (about 20 ms of CPU), and a study opens clients per run: at
thousands of runs that is minutes spent loading the same certificates. A context is safe to share between
clients, threads and event loops.
"""

from __future__ import annotations

import os
import ssl
from functools import cache


def tls_context(trust_env: bool = True) -> ssl.SSLContext:
    """httpx's default verifying context, built once per process: certifi's CA bundle, or the bundle that
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` name when ``trust_env`` (as httpx reads them, when they change
    a new context is built)."""
    if not trust_env:
        return _context(None, None, trust_env=False)
    cert_file, cert_dir = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    return _context(_stamped(cert_file), _stamped(cert_dir), trust_env=True)


def _stamped(path: str | None) -> str | None:
    """``path`` with its inode and mtime: a bundle rotated in place (the same name) gets a new context."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return path  # httpx reports what is wrong with it
    return f"{path}:{st.st_ino}:{st.st_mtime_ns}"


@cache
def _context(cert_file: str | None, cert_dir: str | None, trust_env: bool) -> ssl.SSLContext:
    """The context for these variables' values and their files' stamps (the cache key; httpx reads the
    variables itself)."""
    import httpx

    return httpx.create_ssl_context(trust_env=trust_env)
