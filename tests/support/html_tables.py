"""Reading a page's table the way a person reads it: the text of each cell, per named row."""

from __future__ import annotations

from html.parser import HTMLParser


class _TableRows(HTMLParser):
    """Rows (``tr`` with a ``data-name``) of the table with id ``table_id``: name -> cells."""

    def __init__(self, table_id: str):
        super().__init__()
        self.table_id = table_id
        self.depth = 0  # tables open inside the one read (0: outside it)
        self.rows: dict[str, list[str]] = {}
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and (self.depth or attrs.get("id") == self.table_id):
            self.depth += 1
        elif self.depth and tag == "tr" and "data-name" in attrs:
            self._row = self.rows.setdefault(attrs["data-name"], [])
        elif self._row is not None and tag == "td":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table" and self.depth:
            self.depth -= 1
        elif tag == "td" and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr":
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def table_rows(html: str, table_id: str) -> dict[str, list[str]]:
    """The named rows of a table, in page order, each the text of its cells."""
    parser = _TableRows(table_id)
    parser.feed(html)
    return parser.rows
