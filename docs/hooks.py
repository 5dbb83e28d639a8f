"""MkDocs hooks: keep the site self-contained (no request leaves the machine that opens it).

mkdocs-jupyter's page template carries a loader for mermaid diagrams from a CDN (used only when a
notebook draws one; ours do not) and an empty MathJax ``<script src="">``; both are removed from
every page after it is rendered, and the build fails if any other remote script or stylesheet is left.
"""

from __future__ import annotations

import re

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
