"""Hugging Face hub ids as checkpoint sources: ``org/name`` or ``org/name@revision``,
downloaded with huggingface_hub into VAR_DIR/models/hub.

HF_ENDPOINT (a mirror) and HF_TOKEN (gated and private repos) come from the settings, which
read the environment, and are passed to every call: huggingface_hub reads its own environment
once, at import, so a value set later (or per test) would otherwise be missed. Failures raise
ModelRegistrationError with a reason an operator can act on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from controlplane.deployments.checkpoints import ModelRegistrationError, Progress, no_progress

# Bytes downloaded so far and expected in all, as the download goes.
Transfer = Callable[[int, int], None]

# The hub's repo id rules (letters, digits, '-', '_', '.'; one '/'), then an optional revision:
# a branch, tag or commit (branches may hold '/').
_HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")


@dataclass(frozen=True)
class HubId:
    repo_id: str
    revision: str = "main"

    def __str__(self) -> str:
        return self.repo_id if self.revision == "main" else f"{self.repo_id}@{self.revision}"


def hub_id_parse(source: str) -> HubId | None:
    """The hub id ``source`` spells, or None. A path that exists on the server is never one
    (callers check that first): ``models/llama`` may be either."""
    match = _HUB_ID.match(source.strip())
    if match is None or ".." in source:
        return None
    return HubId(match["repo"], match["revision"] or "main")


def hub_endpoint() -> str:
    return (getattr(settings, "HF_ENDPOINT", "") or "https://huggingface.co").rstrip("/")


def _token() -> str | bool:
    # False, not None: None lets huggingface_hub fall back to a token file in the home folder,
    # which would make the platform's access depend on who last ran `hf auth login` there.
    return getattr(settings, "HF_TOKEN", "") or False


def hub_download(
    hub_id: HubId, *, progress: Progress = no_progress, transfer: Transfer | None = None
) -> Path:
    """Download ``hub_id`` (every file of its revision) and return the local folder,
    VAR_DIR/models/hub/<org>--<name>/<commit>. Files downloaded before are not fetched again."""
    from huggingface_hub import HfApi, hf_hub_download

    endpoint, token = hub_endpoint(), _token()
    progress(f"asking {endpoint} for {hub_id}")
    with _hub_errors(hub_id, endpoint):
        info = HfApi(endpoint=endpoint, token=token).model_info(
            hub_id.repo_id, revision=hub_id.revision, files_metadata=True
        )
    files = [(s.rfilename, s.size or 0) for s in info.siblings or ()]
    if not files:
        raise ModelRegistrationError(f"{hub_id} on {endpoint} holds no files")
    total = sum(size for _, size in files)
    target = _hub_dir(hub_id, info.sha)
    progress(f"downloading into {target}")
    progress(f"downloading {len(files)} files ({total / 2**20:.1f} MiB)")
    done = 0
    report = transfer or (lambda _done, _total: None)
    report(0, total)
    for filename, size in files:
        # One file at a time, so the bytes reported add up in order; per-file bars report
        # the bytes of the file under way.
        bar = _bar_class(lambda n, before=done: report(before + n, total))
        with _hub_errors(hub_id, endpoint):
            hf_hub_download(
                hub_id.repo_id,
                filename,
                revision=info.sha,
                local_dir=target,
                endpoint=endpoint,
                token=token,
                tqdm_class=bar,
            )
        done += size
        report(done, total)
    progress(f"downloaded {hub_id} at commit {info.sha}")
    return target


def _hub_dir(hub_id: HubId, commit: str | None) -> Path:
    folder = hub_id.repo_id.replace("/", "--")
    return Path(settings.VAR_DIR) / "models" / "hub" / folder / (commit or hub_id.revision)


def _bar_class(on_bytes: Callable[[int], None]) -> type:
    """A progress-bar class for hf_hub_download that reports bytes instead of drawing. It has
    the methods huggingface_hub calls on the bars it is given (its own snapshot download
    passes such a stand-in, not a tqdm); a class that is not a tqdm is built as it is."""

    class _Bytes:
        def __init__(self, *args, **kwargs):
            self.n = int(kwargs.get("initial") or 0)
            self.total = kwargs.get("total")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n: int | float | None = 1) -> None:
            self.n += int(n or 0)
            on_bytes(self.n)

        def update_transfer(self, n: int | float | None = 1) -> None:
            pass

        def set_postfix_str(self, *args, **kwargs) -> None:
            pass

        set_transfer_postfix_str = set_description = set_description_str = set_postfix_str

        def refresh(self, *args, **kwargs) -> None:
            pass

        def close(self) -> None:
            pass

    return _Bytes


@contextmanager
def _hub_errors(hub_id: HubId, endpoint: str) -> Iterator[None]:
    """Turns huggingface_hub's and the network's errors into ModelRegistrationError."""
    try:
        yield
    except ModelRegistrationError:
        raise
    except Exception as exc:
        reason = _reason(exc, hub_id, endpoint)
        if reason is None:
            raise
        raise ModelRegistrationError(reason) from exc


def _reason(exc: Exception, hub_id: HubId, endpoint: str) -> str | None:
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{hub_id.repo_id} on {endpoint}"
    token_hint = "HF_TOKEN is set" if _token() else "HF_TOKEN is not set"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, GatedRepoError):
        return (
            f"{where} is gated: accept its terms on the hub with the account whose token "
            f"HF_TOKEN holds ({token_hint})"
        )
    if isinstance(exc, RevisionNotFoundError):
        return f"{where} has no revision {hub_id.revision!r}"
    if isinstance(exc, RepositoryNotFoundError):
        return (
            f"{where} was not found (HTTP {status}): check the id; a private or gated repo "
            f"needs a token that can read it ({token_hint})"
        )
    if isinstance(exc, HfHubHTTPError) and status == 401:
        return f"{endpoint} refused the token (HTTP 401, invalid credentials): check HF_TOKEN"
    if isinstance(exc, HfHubHTTPError) and status == 403:
        return f"{endpoint} refused access to {hub_id.repo_id} (HTTP 403): check HF_TOKEN"
    if isinstance(exc, HfHubHTTPError):
        return f"{endpoint} answered HTTP {status} for {hub_id}: {str(exc).strip()[:300]}"
    if isinstance(exc, LocalEntryNotFoundError) or _is_network_error(exc):
        return (
            f"could not reach {endpoint} ({type(exc).__name__}: {exc}); check the network, "
            "or set HF_ENDPOINT to a mirror"
        )
    if isinstance(exc, OSError):
        return f"downloading {hub_id} failed: {exc}"
    return None


def _is_network_error(exc: BaseException) -> bool:
    # huggingface_hub's HTTP client (httpx2 in this release) raises its transport errors as
    # they are; match them by module so another client release still reads as a network error.
    return any(
        cls.__module__.split(".")[0] in {"httpx", "httpx2", "httpcore", "requests", "urllib3"}
        and ("Connect" in cls.__name__ or "Timeout" in cls.__name__ or "Network" in cls.__name__)
        for cls in type(exc).__mro__
    )
