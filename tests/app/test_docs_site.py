"""The documentation site: built with MkDocs (strict) from the repository, then opened in a real
browser (headless system Chromium through Playwright), offline.

The build runs the same ``docs/generate.py`` and ``mkdocs.yml`` as ``make docs``, except that the
notebooks are not executed (tests/app/test_notebooks.py runs them); every request the pages make
is checked to stay on the local disk.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attndyn.app import browser
from tests.helpers import ROOT

pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("tree")
    for name in ("docs", "examples", "src"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "notebooks", "claims.md", "reference"))
    config = (ROOT / "mkdocs.yml").read_text().replace("execute: true", "execute: false")
    (tree / "mkdocs.yml").write_text(config)
    done = subprocess.run([sys.executable, str(tree / "docs" / "generate.py")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = tree / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(tree / "mkdocs.yml"), "-d", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tree)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_site_has_every_page(site):
    pages = ("index.html", "getting-started/index.html", "guide/engine/index.html", "claims/index.html", "api/core/index.html")
    for page in (*pages, "reference/config/index.html", "reference/cli/index.html"):
        assert (site / page).is_file(), page
    assert "solver.max_pairs" in (site / "reference" / "config" / "index.html").read_text()  # the generated reference pages
    assert "--force-adopt" in (site / "reference" / "cli" / "index.html").read_text()
    catalogue = (site / "claims" / "index.html").read_text()
    for cid in ("polytope", "gaussian-mean-field", "rank-collapse", "sinks"):
        assert f'id="{cid}"' in catalogue, cid
    assert "beta off by 5 %" in catalogue  # a stated sensitivity reaches the catalogue


def test_the_math_is_mathml_in_pages_and_notebooks(site):
    """\\(...\\) and \\[...\\] on the pages, $...$ in the notebooks: MathML in the built HTML, no LaTeX left."""
    index = (site / "index.html").read_text()
    assert index.count("<math ") >= 6
    assert 'display="block"' in index  # the model's equation on its own line
    assert 'class="arithmatex"' not in index
    assert "\\dot x_i(t)" not in index.replace('alttext="', "").split("<math")[0]  # not left as text before the first formula
    notebook = (site / "notebooks" / "01-quickstart" / "index.html").read_text()
    assert notebook.count("<math ") >= 5
    assert "$V = I$" not in notebook
    assert "$z = e^{-tV}x$" not in notebook
    # the guides' defining formulas: MathML, no LaTeX delimiter left as text
    for guide, least in (("engine", 6), ("meanfield", 4), ("trained-models", 6), ("analysis", 3)):
        html = (site / "guide" / guide / "index.html").read_text()
        assert html.count("<math ") >= least, guide
        assert "\\(" not in html, guide


@pytest.mark.skipif(browser.find_chromium() is None, reason="no Chromium on this machine (Debian package 'chromium')")
@pytest.mark.parametrize(("page", "text"), [("index.html", "interacting particle system"), ("api/core/index.html", "prepare")])
def test_pages_open_offline_in_a_browser(site, page, text):
    with sync_api.sync_playwright() as p:
        chromium = browser.launch(p)
        try:
            tab = chromium.new_page()
            remote, errors = [], []

            def local_only(route):
                if route.request.url.startswith("file:"):
                    return route.continue_()
                remote.append(route.request.url)
                return route.abort()

            tab.route("**/*", local_only)
            tab.on("pageerror", lambda e: errors.append(str(e)))
            tab.goto((site / page).as_uri())
            tab.wait_for_load_state("load")
            assert text in tab.inner_text("body")
            assert remote == [], remote
            assert errors == [], errors
            if page == "index.html":  # the model's equation laid out by the browser: its fraction is stacked
                stacked = tab.evaluate(
                    """(() => { const f = document.querySelector('math[display=block] mfrac');
                    const [a, b] = [f.children[0].getBoundingClientRect(), f.children[1].getBoundingClientRect()];
                    return a.height > 0 && a.bottom <= b.top + 1; })()"""
                )
                assert stacked
        finally:
            chromium.close()


def test_the_package_text_cites_no_internal_document():
    """Docstrings, messages and claim texts cite the papers, never the project's internal specification
    (which does not ship): the API pages, ``help()`` and the report are read by users."""
    import re

    hits = [
        f"{path.relative_to(ROOT)}:{k}"
        for path in sorted((ROOT / "src" / "attndyn").rglob("*.py"))
        for k, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bSPEC\b", line)
    ]
    assert not hits, hits
