"""MkDocs hooks: keep the site self-contained (no request leaves the machine that opens it).

mkdocs-jupyter's page template carries a loader for mermaid diagrams from a CDN (used only when a
notebook draws one; ours do not) and an empty MathJax ``<script src="">``; both are removed from
every page after it is rendered, and the build fails if any other remote script or stylesheet is left.

Math: the pages' ``\\(...\\)`` and ``\\[...\\]`` formulas (kept by ``pymdownx.arithmatex``) and the notebooks'
``$...$`` become MathML (:mod:`attndyn.app.mathml`), which the browser draws itself: nothing is fetched.

Progress (``make docs`` runs ``mkdocs build --quiet``, whose log says nothing for minutes while the
notebooks execute): one line on stderr per notebook with its time (``docs: notebooks/NAME.ipynb executed
in 41 s (2 of 4)``), and a line every ``HEARTBEAT`` seconds naming the page being built whenever nothing
else was printed for that long.
"""

from __future__ import annotations

import re
import sys
import threading
import time

HEARTBEAT = 25.0  # seconds without a line after which the page being built is named

REMOTE = re.compile(r"""(?:src|href)=["']https?://[^"']+\.(?:m?js|css)["']|import\(["']https?://""")
MERMAID = re.compile(r'<script type="module">(?:(?!</script>).)*?cdnjs\.cloudflare\.com(?:(?!</script>).)*?</script>', re.S)
EMPTY_SCRIPT = re.compile(r'<script src=""\s*>\s*</script>', re.S)


def on_post_page(output: str, page, config) -> str:
    output = MERMAID.sub("", output)
    output = EMPTY_SCRIPT.sub("", output)
    left = REMOTE.findall(output)
    if left:
        raise ValueError(f"{page.file.src_path} would load {left[0]!r} from the network; the docs must work offline")
    return output


_now: dict = {"page": "the site", "since": 0.0, "printed": 0.0, "done": 0, "notebooks": 0, "execute": False}
_stop = threading.Event()


def _say(text: str) -> None:
    _now["printed"] = time.perf_counter()
    print(f"docs: {text}", file=sys.stderr, flush=True)


def _beat() -> None:
    while not _stop.wait(1.0):
        t = time.perf_counter()
        if t - _now["printed"] >= HEARTBEAT:
            _say(f"building {_now['page']}, {t - _now['since']:.0f} s on it")


def on_pre_build(config) -> None:
    plugin = config.plugins.get("mkdocs-jupyter")
    _now["execute"] = bool(plugin is not None and plugin.config.get("execute"))
    _now.update(page="the site", since=time.perf_counter(), printed=time.perf_counter(), done=0)
    _stop.clear()
    threading.Thread(target=_beat, name="docs progress", daemon=True).start()


def on_files(files, config):
    _now["notebooks"] = sum(1 for f in files if f.src_path.endswith(".ipynb"))
    return files


def on_pre_page(page, config, files):
    _now.update(page=page.file.src_path, since=time.perf_counter())
    if page.file.src_path.endswith(".ipynb") and _now["execute"]:
        _say(f"{page.file.src_path}: executing ({_now['done'] + 1} of {_now['notebooks']} notebooks)")
    return page


ARITHMATEX = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)
MARKDOWN_CELL = re.compile(r"(<div[^>]*\bjp-RenderedMarkdown\b[^>]*>)(.*?)(</div>)", re.S)


def _math(html: str, notebook: bool) -> str:
    from attndyn.app import mathml

    if notebook:
        return MARKDOWN_CELL.sub(lambda m: m[1] + mathml.dollars_to_mathml(m[2]) + m[3], html)
    return ARITHMATEX.sub(lambda m: mathml.delimited_to_mathml(m[2]), html)


def on_page_content(html: str, page, config, files) -> str:
    html = _math(html, page.file.src_path.endswith(".ipynb"))
    if page.file.src_path.endswith(".ipynb"):
        _now["done"] += 1
        verb = "executed" if _now["execute"] else "rendered"
        _say(f"{page.file.src_path} {verb} in {time.perf_counter() - _now['since']:.0f} s ({_now['done']} of {_now['notebooks']} notebooks)")
    _now.update(page="the site", since=time.perf_counter())
    return html


def on_post_build(config) -> None:
    _stop.set()
