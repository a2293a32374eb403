"""Text from a trace as the renderers show it: one shortening rule and the places a name may
break across lines. The ``--json`` document keeps every text whole; the terminal and HTML
reports shorten what they show with ``shorten`` (the TensorBoard page applies the same rule in
the browser, with the limits the plugin serves: ``reports.palette.style_document``)::

    shorten("aten::" + "x" * 10_000)       # 200 characters: head … tail
    line_breaks("aten::_local_scalar_dense; PythonSubclass", 24)   # [18, 39]

A name (op, kernel, device, thread, call site, file) longer than ``NAME_LIMIT`` characters is
shown as its first and last characters around one ``ELLIPSIS`` (the middle goes: the start says
what it is, the end tells overloads and template arguments apart), ``NAME_LIMIT`` characters in
all. Prose that embeds names (a finding's advice, notes, load warnings) is bounded the same way
at ``TEXT_LIMIT``. So no renderer's work or output grows with the length of a name: a 50 MB op
name is 200 characters on the screen. Control characters in a text (a trace may name an op
``"\x1b[2J"``: clear the screen) are shown as their escapes (``\x1b``), never sent to a
terminal; terminal renderers also take trace text as plain text, never as rich markup.
"""

from __future__ import annotations

import re
from functools import lru_cache

NAME_LIMIT = 200  # characters of a name shown (op, kernel, device, thread, call site, file)
TEXT_LIMIT = 1000  # characters of prose that embeds names (advice, notes, load warnings)
ELLIPSIS = "…"

# Where a name may break across lines: after whitespace, "::", ",", ";", "/", "\",
# "|" or ".", and before "(" or "<" (arguments, template arguments). A piece still too long
# breaks after "_", and only then anywhere (folded).
_BREAK = re.compile(r"(?<=\s)(?=\S)|(?<=::)|(?<=[,;/\\|.])(?=[^\s,;/\\|.])|(?<=[^\s(<])(?=[(<])")
_WEAK_BREAK = re.compile(r"(?<=_)(?=[^_])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def mib(n: int | None, signed: bool = False, missing: str = "") -> str:
    """Bytes as MiB with three decimals (``+`` on gains when ``signed``); ``missing`` for None."""
    return missing if n is None else f"{n / 2**20:{'+' if signed else ''},.3f}"


def signed(value: float, spec: str = "+.3f") -> str:
    """``value`` formatted with ``spec`` (which holds ``+``), never as a negative zero: a change
    that rounds to nothing shows ``+0.000``, not ``-0.000``."""
    text = format(value, spec)
    if "-" in text and not any(c in "123456789" for c in text):
        text = text.replace("-", "+", 1)
    return text


def shown(text: str) -> str:
    """``text`` with its control characters (C0, DEL, C1) written as escapes (``\x1b``)."""
    if text.isprintable():  # (the usual case, at C speed: no control character)
        return text
    return _CONTROL.sub(_escape_control, text)


def _escape_control(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def shorten(text: str, limit: int = NAME_LIMIT) -> str:
    """``text`` itself when it has at most ``limit`` characters, else its first
    ``ceil((limit - 1) / 2)`` and last ``floor((limit - 1) / 2)`` characters joined by
    ``ELLIPSIS``: ``limit`` characters in all; control characters ``shown`` as escapes (cut
    again if the escapes made it longer)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    return _cut(shown(_cut(text, limit)), limit)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = limit - 1
    head = keep - keep // 2
    tail = keep // 2
    return text[:head] + ELLIPSIS + (text[len(text) - tail :] if tail else "")


def pieces(text: str) -> list[str]:
    """``text`` cut at every place it may break (``_BREAK``); joined, the pieces are ``text``."""
    cuts = [m.start() for m in _BREAK.finditer(text)]
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) if b > a]


def line_breaks(text: str, width: int) -> list[int]:
    """Offsets in ``text`` (one line, no newline) at which to start a new line so that every
    line fits ``width`` cells, breaking at the places ``_BREAK`` finds (whitespace at a line's
    end does not count); a piece longer than ``width`` breaks after "_", else anywhere.
    Greedy: each line takes as many pieces as fit."""
    from rich.cells import cell_len

    width = max(width, 1)
    out: list[int] = []
    used = 0  # cells on the current line
    start = 0  # offset of the current piece
    for piece, size, full in _sized_pieces(text):
        if used and used + size > width:
            out.append(start)
            used = 0
        if size > width:  # too long for any line: after "_", else anywhere
            for part in _split_long(piece, width):
                if used and used + cell_len(part.rstrip()) > width:
                    out.append(start)
                    used = 0
                used += cell_len(part)
                start += len(part)
            continue
        used += full
        start += len(piece)
    return out


@lru_cache(maxsize=4096)
def _sized_pieces(text: str) -> tuple[tuple[str, int, int], ...]:
    """The pieces of one line, each with its width in cells without and with the whitespace
    that ends it (a table's layout asks for the same texts at many widths)."""
    from rich.cells import cell_len

    return tuple((p, cell_len(p.rstrip()), cell_len(p)) for p in pieces(text))


def _split_long(piece: str, width: int) -> list[str]:
    from rich.cells import cell_len, chop_cells

    cuts = [m.start() for m in _WEAK_BREAK.finditer(piece)]
    out: list[str] = []
    for part in (piece[a:b] for a, b in zip([0, *cuts], [*cuts, len(piece)], strict=True)):
        out += chop_cells(part, width) if cell_len(part) > width else [part]
    return [p for p in out if p]


def min_piece_width(text: str, cap: int) -> int:
    """The widest piece of ``text`` that does not break (its lines' pieces), at most ``cap``:
    the least width a table column can give it without folding a word."""
    from rich.cells import cell_len

    return min(
        max((cell_len(p.rstrip()) for line in text.split("\n") for p in pieces(line)), default=0),
        cap,
    )
