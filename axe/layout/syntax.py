"""Reading layouts from text: the same syntax :func:`format_layout` prints.

Grammar (whitespace free)::

    layout  := "S[" iters "]" (("+" | "-") part)*
    part    := "R[" iters "]" | term            (no "-" before R)
    iters   := ext ":" stride | "(" ext ("," ext)* ")" ":" "(" stride ("," stride)* ")"
             | ext | "(" ext ("," ext)* ")"      (extents only: row-major on m)
             | "(" ext ":" stride ")" ("," "(" ext ":" stride ")")*   (pairs, replicas too)
    stride  := ["-"] INT ["@" NAME]              (no axis: the memory axis m)
    term    := INT ["@" NAME]

The parser never evaluates Python; every error names the position and what was expected.
"""

from __future__ import annotations

import re

from .coord import Coord
from .iters import Iter
from .layout import Layout, _iters_from_subscript

__all__ = ["parse", "LayoutSyntaxError"]

# ASCII only: \d and \w would also take other scripts' digits ('４', '٤') and letters
_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<name>[A-Za-z_]\w*)|(?P<op>[\[\]():,@+\-]))", re.ASCII)
#: longest integer literal read (Python's own int() limit is 4300 digits; 10**100 is 101)
MAX_DIGITS = 1000


class LayoutSyntaxError(ValueError):
    """Raised for text that is not a layout; the message points at the offending column."""


class _Reader:
    def __init__(self, text: str, start: int = 0, stop: int | None = None):
        """Tokens of ``text[start:stop]``; positions (and error messages) refer to all of text."""
        self.text = text
        self.stop = len(text) if stop is None else stop
        self.toks: list[tuple[str, str, int]] = []
        pos = start
        while pos < self.stop:
            mt = _TOKEN.match(text, pos, self.stop)
            if mt is None or mt.end() == pos:
                if text[pos:self.stop].strip() == "":
                    break
                self.fail(pos, "an integer, an axis name or one of [ ] ( ) : , @ + -")
            kind = mt.lastgroup
            self.toks.append((kind, mt.group(kind), mt.start(kind)))
            pos = mt.end()
        self.i = 0
        self.zero_at = None             # the column of the first zero stride read (see iters)

    def fail(self, pos: int, expected: str):
        shown = self.text[pos:min(pos + 12, self.stop)] or "end of text"
        raise LayoutSyntaxError(f"cannot parse layout {_shown(self.text)}: at column {pos} ({shown!r}) "
                                f"expected {expected}")

    def peek(self, value=None):
        if self.i >= len(self.toks):
            return None
        tok = self.toks[self.i]
        return tok if value is None or tok[1] == value else None

    def pos(self) -> int:
        return self.toks[self.i][2] if self.i < len(self.toks) else self.stop

    def take(self, value: str):
        if self.peek(value) is None:
            self.fail(self.pos(), repr(value))
        self.i += 1

    def int(self) -> int:
        tok = self.peek()
        if tok is None or tok[0] != "int":
            self.fail(self.pos(), "an integer")
        if len(tok[1]) > MAX_DIGITS:
            self.fail(tok[2], f"an integer of at most {MAX_DIGITS} digits, not {len(tok[1])}")
        self.i += 1
        return int(tok[1])

    def signed_int(self) -> int:
        if self.peek("-"):
            self.i += 1
            return -self.int()
        return self.int()

    def axis(self) -> str:
        if self.peek("@"):
            self.i += 1
            tok = self.peek()
            if tok is None or tok[0] != "name":
                self.fail(self.pos(), "an axis name after '@'")
            self.i += 1
            return tok[1]
        return "m"

    def stride(self) -> Coord:
        at = self.pos()
        s = self.signed_int()
        axis = self.axis()              # consumed even for a zero stride, so the error points at it
        if not s and self.zero_at is None:
            self.zero_at = at
        return Coord.unit(axis, s) if s else 0

    def int_list(self) -> list:
        items = [self.int()]
        while self.peek(","):
            self.i += 1
            items.append(self.int())
        return items

    def iters(self, head: str) -> tuple[Iter, ...]:
        self.take(head)
        self.take("[")
        start = self.pos()
        self.zero_at = None             # the column of the first zero stride, where the error is
        try:
            if self.peek("("):
                self.i += 1
                if self._pairs_ahead():
                    its = self._pairs()
                else:
                    ext = tuple(self.int_list())
                    self.take(")")
                    if self.peek(":"):
                        self.i += 1
                        self.take("(")
                        strides = [self.stride()]
                        while self.peek(","):
                            self.i += 1
                            strides.append(self.stride())
                        self.take(")")
                        its = _iters_from_subscript(slice(ext, tuple(strides)), head)
                    else:
                        its = _iters_from_subscript(ext, head)
            else:
                e = self.int()
                if self.peek(":"):
                    self.i += 1
                    its = _iters_from_subscript(slice(e, self.stride()), head)
                else:
                    its = _iters_from_subscript(e, head)
        except (ValueError, SyntaxError) as err:
            if isinstance(err, LayoutSyntaxError):
                raise
            at = self.zero_at if self.zero_at is not None and "non-zero" in str(err) else start
            raise LayoutSyntaxError(f"cannot parse layout {_shown(self.text)}: at column {at}: {err}") from None
        self.take("]")
        return its

    def _pairs_ahead(self) -> bool:
        # "(e:s), (e:s)" form: an int followed by ':' right after the opening parenthesis
        return (self.i + 1 < len(self.toks) and self.toks[self.i][0] == "int"
                and self.toks[self.i + 1][1] == ":")

    def _pairs(self) -> tuple[Iter, ...]:
        its = []
        while True:
            e = self.int()
            self.take(":")
            s = self.stride()
            its.extend(_iters_from_subscript(slice(e, s), "R"))
            self.take(")")
            if not self.peek(","):
                return tuple(its)
            self.i += 1
            self.take("(")

    def term(self) -> Coord:
        k = self.int()
        return Coord.unit(self.axis(), k)


_SWIZZLED = re.compile(r"\s*Swizzle\((\d+),\s*(\d+),\s*(\d+)\)\s*(?:∘|o)\s*\(", re.ASCII)
_ON = re.compile(r"\s*on\s+([A-Za-z_]\w*)", re.ASCII)


def _shown(text: str) -> str:
    """The text for an error message: whole when short, else its head and tail (a 10 kB input
    must not make a 10 kB message)."""
    return repr(text) if len(text) <= 120 else f"{text[:60]!r}…{text[-40:]!r} ({len(text)} characters)"


def parse(text: str):
    """Parse the layout syntax (e.g. ``S[(8,2):(4@lane,1)] + R[2:4@warp] + 5@warp``).

    Swizzled layouts read as ``Swizzle(3,3,3) ∘ (S[...]) [on AXIS] [+ base]`` (``o`` may
    stand for ``∘``).  Law: ``parse(str(L)) == L`` for every layout L, swizzled or not; any
    other text raises :class:`LayoutSyntaxError` naming the column, without recursion (nesting
    depth costs nothing) and in time linear in the text.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse expects text, got {type(text).__name__}")
    sw = _SWIZZLED.match(text)
    if sw:
        return _parse_swizzled(text, sw)
    return _layout(_Reader(text))


def _layout(rd: _Reader) -> Layout:
    if rd.peek("S") is None:
        rd.fail(rd.pos(), "'S[' to open the shard")
    shard = rd.iters("S")
    replica: list[Iter] = []
    offset = _parts(rd, replica)
    return Layout._make(shard, tuple(replica), offset)


def _parts(rd: _Reader, replica: list | None) -> Coord:
    """The ``(+|-) part`` sequence to the end: replica parts appended to ``replica`` (refused
    when it is None: after a swizzle only offset terms may follow), the offset terms summed."""
    offset = Coord()
    while rd.peek() is not None:
        sign_tok = rd.peek()
        if sign_tok[1] not in "+-":
            rd.fail(rd.pos(), "'+' or '-' before the next part")
        rd.i += 1
        if rd.peek("R") and replica is not None:
            if sign_tok[1] == "-":
                rd.fail(sign_tok[2], "'+' before a replica part")
            replica.extend(rd.iters("R"))
        elif replica is None and (rd.peek("R") or rd.peek("S")):
            rd.fail(rd.pos(), "an offset term (a swizzled layout's replica goes inside the parentheses)")
        else:
            t = rd.term()
            offset = offset + (t if sign_tok[1] == "+" else -t)
    return offset


def _parse_swizzled(text: str, sw):
    from .swizzle import SwizzledLayout
    depth, end = 1, sw.end()
    while depth and end < len(text):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        end += 1
    if depth:
        raise LayoutSyntaxError(f"cannot parse layout {_shown(text)}: unbalanced parentheses after Swizzle(...)")
    if _SWIZZLED.match(text, sw.end()):
        raise LayoutSyntaxError(f"cannot parse layout {_shown(text)}: at column {sw.end()}: a swizzle wraps a "
                                "plain layout, not another swizzle")
    inner_rd = _Reader(text, sw.end(), end - 1)
    inner = _layout(inner_rd)
    axis, rest = "m", end
    on = _ON.match(text, end)
    if on:
        axis, rest = on.group(1), on.end()
    base = _parts(_Reader(text, rest), None)
    try:
        return SwizzledLayout(inner, tuple(int(g) for g in sw.groups()), base, axis)
    except ValueError as err:
        raise LayoutSyntaxError(f"cannot parse layout {_shown(text)}: {err}") from None
