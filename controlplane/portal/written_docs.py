"""/docs/: the project's written docs (docs/*.md) rendered as pages, linked from the API docs
and the portal, so a deployment with no internet still has them."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.http import Http404
from django.shortcuts import render
from django.utils.safestring import mark_safe
from markdown_it import MarkdownIt

# Raw HTML in the Markdown is shown as text, not passed through.
_markdown = MarkdownIt("commonmark", {"html": False}).enable("table")
# Links between the docs ("operations.md#https") lead to their pages here.
_DOC_LINK = re.compile(r'href="([a-z0-9_-]+)\.md(#[^"]*)?"')
_NAME = re.compile(r"[a-z0-9_-]+")


def _docs_dir() -> Path:
    return Path(settings.BASE_DIR) / "docs"


def _title(text: str, name: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return name


@lru_cache(maxsize=64)
def _rendered(path: Path, mtime: float) -> tuple[str, str]:
    text = path.read_text(encoding="utf-8")
    html = _DOC_LINK.sub(lambda m: f'href="../{m[1]}/{m[2] or ""}"', _markdown.render(text))
    return _title(text, path.stem), html


def doc_index(request):
    pages = [
        {"name": path.stem, "title": _rendered(path, path.stat().st_mtime)[0]}
        for path in sorted(_docs_dir().glob("*.md"))
    ]
    return render(request, "docs/index.html", {"pages": pages})


def doc_page(request, name: str):
    path = _docs_dir() / f"{name}.md"
    if not _NAME.fullmatch(name) or not path.is_file():
        raise Http404("no such page of the docs")
    title, html = _rendered(path, path.stat().st_mtime)
    return render(request, "docs/page.html", {"title": title, "body": mark_safe(html)})
