"""Math rendered offline: LaTeX turned into MathML when a page is written, drawn by the browser itself.

The report, the decoder pages, the docs site and the notebooks write their formulas in LaTeX between
``\\(`` and ``\\)`` (inline) or ``\\[`` and ``\\]`` (display); :func:`html_text` escapes the prose and
replaces each formula by MathML (``latex2mathml``, a pure-Python converter installed with attndyn).
MathML Core is drawn natively by Chromium (since 109), Firefox and Safari: no script, no font and no
request leaves the page, so a report opened from a laptop without network shows its math as written.
A formula the converter cannot read is shown as its LaTeX source in ``<code>`` (never dropped, never
an error: the page is still written).

``$...$`` is not a delimiter here: it would take shell variables (``$HOME``) in prose for math. The
notebooks, where ``$...$`` is Jupyter's convention, are converted by :func:`dollars_to_mathml` on their
rendered markdown only.
"""

from __future__ import annotations

import html
import re

# \( ... \) or \[ ... \]: the formula is the shortest run up to the matching closer
DELIMITED = re.compile(r"\\\((?P<inline>.+?)\\\)|\\\[(?P<display>.+?)\\\]", re.S)
# $$ ... $$ or $ ... $ with no space just inside the dollars (Jupyter's markdown), not escaped \$
DOLLARS = re.compile(r"(?<![\\$])\$\$(?P<display>[^$]+?)\$\$|(?<![\\$\w])\$(?=\S)(?P<inline>[^$\n]+?)(?<=\S)\$(?![\w$])")


def to_mathml(tex: str, *, display: bool = False) -> str:
    """MathML of one LaTeX formula (``display`` sets it on its own line); its LaTeX in ``<code>`` when the
    converter cannot read it."""
    from latex2mathml.converter import convert

    try:
        out = convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # the converter raises many types on LaTeX it does not know; the source is shown instead
        return f"<code class='tex'>{html.escape(tex)}</code>"
    # the source travels with the formula: copy-paste and screen readers get the LaTeX
    return out.replace("<math ", f'<math alttext="{html.escape(tex.strip(), quote=True)}" ', 1)


def html_text(text: str) -> str:
    """``text`` as HTML: the prose escaped, each ``\\(...\\)`` and ``\\[...\\]`` formula as MathML."""
    out, end = [], 0
    for m in DELIMITED.finditer(text):
        out.append(html.escape(text[end : m.start()]))
        display = m["display"] is not None
        out.append(to_mathml(m["display"] if display else m["inline"], display=display))
        end = m.end()
    out.append(html.escape(text[end:]))
    return "".join(out)


def plain(text: str) -> str:
    """``text`` with its formula delimiters removed, for a terminal (the LaTeX itself is kept)."""
    return DELIMITED.sub(lambda m: m["display"] if m["display"] is not None else m["inline"], text)


def dollars_to_mathml(fragment: str) -> str:
    """Already-rendered HTML (a notebook's markdown) with its ``$...$`` and ``$$...$$`` formulas as MathML.
    The formula text is HTML-escaped there (``&lt;``), so it is unescaped before conversion."""

    def one(m: re.Match) -> str:
        display = m["display"] is not None
        return to_mathml(html.unescape(m["display"] if display else m["inline"]), display=display)

    return DOLLARS.sub(one, fragment)


def delimited_to_mathml(fragment: str) -> str:
    """Already-rendered HTML with its ``\\(...\\)`` and ``\\[...\\]`` formulas as MathML (the docs site)."""

    def one(m: re.Match) -> str:
        display = m["display"] is not None
        return to_mathml(html.unescape(m["display"] if display else m["inline"]), display=display)

    return DELIMITED.sub(one, fragment)
