"""How Daphne receives request bodies, adjusted for an API that refuses large ones.

Two changes to Twisted's ``http.Request`` as Daphne uses it, made when the ASGI application is
imported (controlplane/asgi.py):

- **No form parsing.** Twisted parses every POST body sent as ``multipart/form-data`` or
  ``application/x-www-form-urlencoded`` into ``request.args`` before Daphne sees the request.
  For an upload to ``/v1/files`` that means reading the whole file into memory and parsing it
  with the ``email`` package (Django then parses it again, streaming, to a temporary file), and
  a malformed multipart body is answered by Twisted itself with a bare 400 that has no body,
  never the JSON error the API promises. Daphne never reads ``request.args``.
- **Over-cap bodies are dropped as they arrive.** Daphne buffers a whole body (a temporary
  file past 100 kB), then queues all of it for the application in 8 kB messages at once: a
  60 MiB body that the application refuses on its Content-Length alone still passed through
  the process's heap, and the allocator kept hundreds of MiB after a few of them. When the
  declared length is already over the path's cap, nothing of the body is kept; the application
  sees the headers (and an empty body) and answers its 413 from the Content-Length.
"""

from __future__ import annotations

import io
from collections.abc import Callable


class _DiscardedBody(io.BytesIO):
    """A request's content file that keeps nothing written to it."""

    def write(self, data) -> int:
        return len(data)


def _request_path(request) -> str:
    raw = getattr(request.channel, "_path", b"") or b""  # the request line's target, so far
    return raw.split(b"?", 1)[0].decode("latin-1")


def adjust_daphne_bodies(limit_for_path: Callable[[str], int | None]) -> None:
    """Patch Daphne's request class once; ``limit_for_path`` gives a path's body cap in bytes
    (None: uncapped)."""
    try:
        from daphne.http_protocol import WebRequest
    except ImportError:  # served by another ASGI server: nothing to do
        return
    if getattr(WebRequest, "_bodies_adjusted", False):
        return
    original_init = WebRequest.__init__
    original_got_length = WebRequest.gotLength

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self._parsePOSTFormSubmission = False  # twisted.web.http.Request's switch for it

    def gotLength(self, length):
        original_got_length(self, length)
        if length is None or self.channel is None:
            return
        limit = limit_for_path(_request_path(self))
        if limit is not None and length > limit:
            self.content.close()
            self.content = _DiscardedBody()

    WebRequest.__init__ = __init__
    WebRequest.gotLength = gotLength
    WebRequest._bodies_adjusted = True
