"""The report pages in a real browser: headless system Chromium through Playwright (issue 12).

Skips with one line when Playwright or a Chromium is missing (``.ci/run`` installs the Debian
package ``chromium``). Playwright is pointed at that executable and never downloads a browser.
"""

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from attndyn.app import browser, report
from attndyn.claims import EXPERIMENTS, load
from attndyn.claims.runner import run_claim
from tests.tiny_claims import tiny_config

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
if browser.find_chromium() is None:
    pytest.skip("no Chromium on this machine (Debian package 'chromium'); the browser tests need one", allow_module_level=True)

pytestmark = pytest.mark.slow
CLAIMS = ["model-equivalence", "leaders", "hardmax", "long-context", "high-dimensional"]


@pytest.fixture(scope="module")
def claims_report(tmp_path_factory) -> Path:
    from attndyn.workflow import ownership

    out = tmp_path_factory.mktemp("report")
    owner = ownership.claim(out, "report", "attndyn reproduce")  # as reproduce does: `attndyn report` adopts only what attndyn wrote
    owner.mkdir("runs")
    for cid in CLAIMS:
        run_claim(cid, load(cid), out / "runs" / cid, seed=0, quick=True, config=tiny_config(cid))
    owner.add("runs", *(f"runs/{cid}" for cid in CLAIMS))
    report.build(out, list(EXPERIMENTS))
    owner.add("index.html", "results.json")
    ownership.unlock(out)  # as reproduce's end does: the `attndyn report` child below takes the folder next
    return out


@pytest.fixture(scope="module")
def pw():
    with sync_api.sync_playwright() as p:
        chromium = browser.launch(p)
        yield chromium
        chromium.close()


def open_page(pw, path: Path, width=1400, height=900):
    page = pw.new_page(viewport={"width": width, "height": height})
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    failed = []
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, errors, failed


def assert_page_is_whole(page, root: Path, errors, failed):
    assert errors == [], errors
    assert failed == [], failed
    broken = page.evaluate("Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")
    assert broken == []
    assert page.evaluate("document.images.length") > 0
    for href in page.evaluate("Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'))"):
        if href.startswith("#"):
            assert page.evaluate("id => document.getElementById(id) !== null", unquote(href[1:])), href
            continue
        url = urlparse(href)
        assert url.scheme in ("", "file"), f"external link {href}: the page must open offline"
        assert (root / unquote(url.path)).is_file(), href
    external = page.evaluate("Array.from(document.querySelectorAll('[src]')).map(e => e.getAttribute('src')).filter(s => /^https?:/.test(s))")
    assert external == []


def test_report_loads_without_errors_or_broken_images_or_links(pw, claims_report):
    page, errors, failed = open_page(pw, claims_report / "index.html")
    assert_page_is_whole(page, claims_report, errors, failed)
    page.close()


def test_every_claim_has_a_card_with_its_verdict_and_a_picture(pw, claims_report):
    data = json.loads((claims_report / "results.json").read_text())
    page, _, _ = open_page(pw, claims_report / "index.html")
    assert page.locator(".card").count() == len(data["claims"]) == len(CLAIMS)
    for claim in data["claims"]:
        card = page.locator(f"#card-{claim['id']}")
        assert card.get_attribute("data-verdict") == claim["verdict"]
        assert card.locator(".badge").inner_text() == claim["verdict"]
        assert card.locator("img").count() == 1
        assert card.is_visible()
        # the full title, wrapped, never clipped; the checks read as sentences
        title = card.locator("h3")
        assert title.inner_text() == json.loads((claims_report / "runs" / claim["id"] / "result.json").read_text())["title"]
        assert title.evaluate("e => e.scrollHeight <= e.clientHeight + 1")
        assert "..." not in card.locator("ul").inner_text()
    # the first screen (1400 x 900) shows the grid with pictures
    first = page.locator(".card").first.bounding_box()
    assert first["y"] + first["height"] < 900
    page.close()


def test_the_filters_show_only_the_chosen_verdict_and_kind(pw, claims_report):
    data = json.loads((claims_report / "results.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in data["claims"]}
    page, errors, _ = open_page(pw, claims_report / "index.html")
    for verdict in ("report", "pass", "fail"):
        page.click(f"button[data-group=verdict][data-value='{verdict}']")
        visible = [cid for cid in verdicts if page.locator(f"#card-{cid}").is_visible()]
        assert visible == [cid for cid, v in verdicts.items() if v == verdict], verdict
        assert page.locator("#shown").inner_text() == str(len(visible))
    page.click("button[data-group=verdict][data-value='all']")
    page.click("button[data-group=kind][data-value='report']")
    kinds = {cid: load(cid).CLAIM.kind for cid in verdicts}
    visible = [cid for cid in verdicts if page.locator(f"#card-{cid}").is_visible()]
    assert visible == [cid for cid, k in kinds.items() if k == "report"]
    page.click("button[data-group=kind][data-value='all']")
    assert all(page.locator(f"#card-{cid}").is_visible() for cid in verdicts)
    assert errors == []
    page.close()


def test_a_card_opens_its_section(pw, claims_report):
    page, _, _ = open_page(pw, claims_report / "index.html")
    section = page.locator("details.claim#hardmax")
    assert section.evaluate("d => d.open") is False
    page.click("#card-hardmax h3 a")
    page.wait_for_function("document.getElementById('hardmax').open === true")
    assert section.locator("table").first.is_visible()
    assert section.locator("figure img").first.is_visible()
    page.close()


MATH_BOXES = """Array.from(document.querySelectorAll('math')).filter(m => m.checkVisibility()).map(m => {
    const r = m.getBoundingClientRect(); return {w: r.width, h: r.height, tex: m.getAttribute('alttext')}; })"""
# a fraction drawn as a fraction (MathML laid out by the browser): its numerator sits above its denominator
FRACTION_STACKED = """(() => { const f = document.querySelector('header math mfrac');
    const [a, b] = [f.children[0].getBoundingClientRect(), f.children[1].getBoundingClientRect()];
    return a.bottom <= b.top + 1 && Math.abs((a.left + a.right) - (b.left + b.right)) < a.width + b.width; })()"""


def test_the_math_is_drawn_by_the_browser_offline(pw, claims_report):
    """The header's model and model-equivalence's statement are MathML that Chromium lays out (no script, no font
    fetched): every formula has a box, the fraction is stacked, and no LaTeX source is left in the text."""
    page, errors, failed = open_page(pw, claims_report / "index.html")
    page.click("#card-model-equivalence h3 a")
    page.wait_for_function("document.getElementById('model-equivalence').open === true")
    boxes = page.evaluate(MATH_BOXES)
    assert len(boxes) >= 3, boxes  # the model, and the statement's two formulas
    for box in boxes:
        assert box["w"] > 5, box
        assert box["h"] > 5, box
    assert any(box["tex"].startswith("\\dot z_i") for box in boxes)
    assert page.evaluate(FRACTION_STACKED)
    header = next(b for b in boxes if "frac" in b["tex"])
    line = page.evaluate("parseFloat(getComputedStyle(document.querySelector('header p')).fontSize)")
    assert header["h"] > 1.5 * line  # a fraction in a row of text, not the LaTeX written flat
    text = page.inner_text("body")
    assert "\\(" not in text
    assert "\\frac" not in text
    assert errors == []
    assert failed == []
    page.close()


def test_report_command_writes_the_preview_of_the_first_screen(claims_report):
    # in a subprocess: Playwright's sync API cannot start a second instance inside this module's
    (claims_report / "preview.png").unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-m", "attndyn", "report", str(claims_report)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    head = (claims_report / "preview.png").read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (1400, 900)


@pytest.mark.checkpoint
def test_checkpoint_page_loads_whole(pw, minilm_checkpoint_page):
    code, output, out = minilm_checkpoint_page
    assert code == 0, output
    page, errors, failed = open_page(pw, out / "index.html")
    assert_page_is_whole(page, out, errors, failed)
    assert page.locator("h1").count() == 1
    page.close()


@pytest.fixture(scope="module")
def decoder_page(tmp_path_factory) -> tuple[Path, dict]:
    """The decoder page of the tests' tiny random Llama (3 blocks, prompts of 64 tokens: every finding has a value)."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    import random

    import torch

    from attndyn.app.decoder_page import decoder_report
    from tests.models.test_decoder_parallel import WORDS, _tiny_folder

    root = tmp_path_factory.mktemp("decoder")
    rng = random.Random(0)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(64)) for _ in range(4)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("ATTNDYN_THREADS", "1")  # the jobs in this process: forking the test process costs more than they take
        record = decoder_report(str(_tiny_folder(root)), prompts=prompts, held_out=prompts[:1], out=root / "page", twin_layers=(0, 1),
                                dtype=torch.float64)  # fmt: skip
    return root / "page", record


def test_the_decoder_page_s_first_screen_holds_the_findings_figures(pw, decoder_page):
    """Issue 47, item 5: at 1400 x 900 the page opens with one figure per finding, whole and loaded, above the
    compact table of findings and the sentences."""
    out, record = decoder_page
    page, errors, failed = open_page(pw, out / "index.html")
    assert_page_is_whole(page, out, errors, failed)
    findings = [f for f in record["figures"] if "/finding_" in f]
    assert len(findings) == 7  # sinks, massive activations, norm ratio, cosine, leaders, attribution, regimes
    images = page.locator("#finding-figures img")
    assert [images.nth(k).get_attribute("src") for k in range(images.count())] == findings
    boxes = [images.nth(k).bounding_box() for k in range(images.count())]
    shown = [b for b in boxes if b["y"] >= 0 and b["y"] + b["height"] <= 900 and b["x"] + b["width"] <= 1400]
    assert len(shown) >= 3, boxes  # the first screen: a row of figures at least, whole
    assert boxes[0]["y"] < 300  # the first figure right below the title
    table, sentences = (page.locator(s).bounding_box()["y"] for s in ("#findings-table", "#findings-sentences"))
    assert max(b["y"] for b in boxes) < table < sentences
    assert page.evaluate("Array.from(document.querySelectorAll('#finding-figures img')).every(i => i.complete && i.naturalWidth > 0)")
    page.close()


def test_chromium_is_the_system_one_or_the_one_named(monkeypatch, tmp_path):
    assert Path(browser.find_chromium()).is_file()
    assert browser.find_chromium() in {shutil.which(n) for n in browser.CANDIDATES}
    monkeypatch.setenv("ATTNDYN_CHROMIUM", str(tmp_path / "nowhere"))
    assert browser.find_chromium() is None
    with pytest.raises(browser.BrowserUnavailable, match="no Chromium"):
        browser.screenshot(tmp_path / "x.html", tmp_path / "x.png")


def test_per_head_tables_sort_and_filter(pw, tmp_path):
    """The checkpoint and decoder pages' per-head table: a header click sorts numerically, the box filters."""
    from attndyn.app.tables import TABLE_SCRIPT, sortable_table

    rows = [["0", "3", "polytope", "10.5"], ["1", "0", "none", "2.25"], ["2", "1", "polytope", "100"]]
    page_html = "<html><body>" + sortable_table("heads", ["layer", "head", "regime", "beta"], rows) + TABLE_SCRIPT + "</body></html>"
    path = tmp_path / "t.html"
    path.write_text(page_html)
    page, errors, failed = open_page(pw, path)

    def column(k):
        return [r.inner_text() for r in page.locator(f"#heads tbody tr td:nth-child({k})").all()]

    page.click("#heads th:nth-child(4)")
    assert column(4) == ["2.25", "10.5", "100"]  # numbers, not strings
    page.click("#heads th:nth-child(4)")
    assert column(4) == ["100", "10.5", "2.25"]
    page.fill("#heads-filter", "polytope")
    visible = [r for r in page.locator("#heads tbody tr").all() if r.is_visible()]
    assert len(visible) == 2
    assert errors == []
    assert failed == []
    page.close()
