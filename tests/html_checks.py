"""Reading an HTML report back as a browser would: its scripts, its embedded figures, its tables
and every tag, with Python's own HTML parser (independent of the renderer)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

URL = re.compile(r"^\s*(https?:)?//", re.IGNORECASE)


@dataclass
class Page:
    scripts: list[tuple[dict[str, str | None], str]] = field(default_factory=list)
    tags: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    tables: list[list[list[str]]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, dict[str, Any]]:
        """Embedded figures by the id of the chart they draw."""
        return {str(a["data-target"]): json.loads(body) for a, body in self.scripts
                if a.get("type") == "application/json" and "figure" in (a.get("class") or "")}

    def table_after(self, header: tuple[str, ...]) -> list[list[str]]:
        """Rows (as text) of every table whose header row is ``header``, concatenated."""
        out = []
        for t in self.tables:
            if tuple(t[0]) == header:
                out += t[1:]
        return out


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._script: dict[str, str | None] | None = None
        self._body: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.page.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script, self._body = dict(attrs), []
        elif tag == "table":
            self.page.tables.append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.page.scripts.append((self._script, "".join(self._body)))
            self._script = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.page.tables[-1].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._body.append(data)
            return
        if self._cell is not None:
            self._cell.append(data)
        self.page.text.append(data)


def parse(html: str) -> Page:
    p = _Parser()
    p.feed(html)
    p.close()
    return p.page


def assert_offline(page: Page) -> None:
    """No script, stylesheet, image or frame names a network location, and no script body
    spells a CDN URL."""
    assert page.scripts, "no script at all"
    for attrs, body in page.scripts:
        assert not URL.match(attrs.get("src") or ""), attrs
        assert "https://cdn" not in body and "http://cdn" not in body
    for tag, attrs in page.tags:
        for key in ("src", "href"):
            value = attrs.get(key) or ""
            assert not URL.match(value), (tag, attrs)
