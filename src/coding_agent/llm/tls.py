"""One TLS context per process for the model clients (and the forge's connection pools,
`sources/http.py`).

Each run opens a fresh conversation, and the provider SDKs build a new HTTP client for
it, which builds a new TLS context and loads the system's CA certificates again: about
0.1 CPU-s per run before its first model request, the whole per-task budget of issue 13.
A context configured once (the HTTP library's own default: the same trust store,
`SSL_CERT_FILE` and `SSL_CERT_DIR` honoured) is shared instead; it holds no state of a
connection, and sharing one across clients is what the `ssl` module intends.
"""

from __future__ import annotations

import functools
import importlib
import ssl

__all__ = ["shared_tls_context"]


@functools.cache
def shared_tls_context(http_library: str) -> ssl.SSLContext:
    """The default client context of `http_library` (`httpx` or the `httpx2` the openai SDK uses)."""
    module = importlib.import_module(http_library)
    context: ssl.SSLContext = module.create_ssl_context()
    return context
