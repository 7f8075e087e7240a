"""A local Hugging Face hub mirror: the endpoints huggingface_hub uses to download a model,
served from folders on disk, because no hub is reachable from the tests.

- ``GET /api/models/{org}/{name}/revision/{rev}`` (model_info): the commit and the files
  (``siblings``, with sizes when asked with ``blobs``).
- ``HEAD``/``GET /{org}/{name}/resolve/{rev}/{file}`` (hf_hub_download): the headers
  huggingface_hub reads (file_download.get_hf_file_metadata: ``X-Repo-Commit``, ``ETag``,
  ``Content-Length``), then the bytes.

Errors are answered as the hub answers them (utils/_http.hf_raise_for_status reads
``X-Error-Code`` and ``X-Error-Message``): an unknown repo is 404 ``RepoNotFound``; with a
``token`` set, a request without it is 401 ``GatedRepo`` and one with another token is 401
"Invalid credentials in Authorization header".
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


class HubMirror:
    """``with HubMirror({"org/tiny": folder}, token="hf_x") as hub:`` serves at ``hub.url``.

    ``hold_files`` holds every file download until ``release()``, so a test can look at a
    registration while its download is under way."""

    def __init__(
        self, repos: dict[str, Path], *, token: str | None = None, hold_files: bool = False
    ):
        self.repos = {repo: Path(folder) for repo, folder in repos.items()}
        self.token = token
        self._released = threading.Event()
        if not hold_files:
            self._released.set()
        self.requests: list[tuple[str, str]] = []  # (method, path) in the order they came
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def commit(self, repo: str) -> str:
        """The repo's commit: a hash of its files, so it is stable and 40 hex digits."""
        digest = hashlib.sha1()
        for file in self.files(repo):
            digest.update(file.relative_to(self.repos[repo]).as_posix().encode())
            digest.update(file.read_bytes())
        return digest.hexdigest()

    def release(self) -> None:
        self._released.set()

    def downloads_started(self) -> int:
        return sum(1 for method, path in self.requests if method == "GET" and "/resolve/" in path)

    def files(self, repo: str) -> list[Path]:
        return sorted(p for p in self.repos[repo].rglob("*") if p.is_file())

    def __enter__(self) -> HubMirror:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _handler(hub: HubMirror) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # huggingface_hub's client keeps connections open

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _answer(self, *, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path))
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                repo, rest = "/".join(parts[2:4]), parts[4:]
                if not self._allowed(repo):
                    return
                if rest[:1] == ["revision"] and not self._known_revision(repo, rest[1:]):
                    return
                if rest[:1] in ([], ["revision"]):
                    return self._model_info(repo, body=body)
            elif len(parts) >= 5 and parts[2] == "resolve":
                repo, file = "/".join(parts[:2]), "/".join(parts[4:])
                if not self._allowed(repo):
                    return
                return self._file(repo, file, body=body)
            self._send(404, b"not found", body=body)

        def _allowed(self, repo: str) -> bool:
            """Refuse as the hub does; True when the request may go on."""
            if repo not in hub.repos:
                self._send(404, b"Repository not found", error_code="RepoNotFound")
                return False
            if hub.token is None:
                return True
            sent = self.headers.get("Authorization")
            if sent == f"Bearer {hub.token}":
                return True
            if sent is None:
                message = f"Access to model {repo} is restricted. You must be authenticated."
                self._send(401, message.encode(), error_code="GatedRepo", error_message=message)
            else:
                message = "Invalid credentials in Authorization header"
                self._send(401, message.encode(), error_message=message)
            return False

        def _known_revision(self, repo: str, revision: list[str]) -> bool:
            """Each repo has one commit, on branch main."""
            if "/".join(revision) in ("main", hub.commit(repo)):
                return True
            self._send(404, b"Invalid rev id", error_code="RevisionNotFound")
            return False

        def _model_info(self, repo: str, *, body: bool) -> None:
            root = hub.repos[repo]
            siblings = [
                {"rfilename": f.relative_to(root).as_posix(), "size": f.stat().st_size}
                for f in hub.files(repo)
            ]
            info = {"id": repo, "modelId": repo, "sha": hub.commit(repo), "siblings": siblings}
            self._send(200, json.dumps(info).encode(), content_type="application/json", body=body)

        def _file(self, repo: str, file: str, *, body: bool) -> None:
            target = hub.repos[repo] / file
            if ".." in file or not target.is_file():
                self._send(404, b"Entry not found", error_code="EntryNotFound", body=body)
                return
            if body and not hub._released.wait(timeout=300):
                self._send(503, b"held too long")
                return
            data = target.read_bytes()
            headers = {
                "X-Repo-Commit": hub.commit(repo),
                "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
            }
            self._send(200, data, headers=headers, body=body)

        def _send(
            self,
            status: int,
            data: bytes,
            *,
            body: bool = True,
            content_type: str = "application/octet-stream",
            headers: dict[str, str] | None = None,
            error_code: str | None = None,
            error_message: str | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if error_code:
                self.send_header("X-Error-Code", error_code)
            if error_message:
                self.send_header("X-Error-Message", error_message)
            self.end_headers()
            if body and self.command != "HEAD":
                self.wfile.write(data)

    return Handler
