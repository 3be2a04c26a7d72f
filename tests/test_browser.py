"""A real browser (Debian Chromium via Playwright) reads every page of the built book from disk.

Checks per page: it loads with no request leaving the disk, every image decoded, every math
element rendered by MathJax as SVG with no raw TeX left, no console error beyond the documented
allow-list (tests/browser_allowlist.txt), and at a phone's 375 px nothing makes the page wider
than the screen. Once: the landing page names its profile, the footer, logo and favicon render,
a run's page offers its executed notebook. A full-page screenshot of each page is saved under
test-artifacts/screenshots/ for a human to look at.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from book_build import ARTIFACTS, REPO, SMOKE_PROFILE, toc_files

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = ARTIFACTS / "screenshots"
PHONE = {"width": 375, "height": 812}
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.notebook,
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian Chromium is not installed at /usr/bin/chromium (`make browser` installs it "
        "with apt-get; `playwright install` is never used)",
    ),
]


def load_allowlist(path: Path = REPO / "tests" / "browser_allowlist.txt") -> list[re.Pattern]:
    """Regular expressions of console messages that are not failures (one per line, # comments)."""
    patterns = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            patterns.append(re.compile(line))
    return patterns


# Runs in the page after load: waits for MathJax, then reports what a reader would see.
INSPECT_JS = """
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const imgs = [...document.querySelectorAll('img')];
  await Promise.all(imgs.map(i => {
    i.loading = 'eager';
    return i.complete ? null : new Promise(r => { i.onload = i.onerror = r; });
  }));
  const mathEls = [...document.querySelectorAll('.math, span.math, div.math')];
  const unrendered = mathEls.filter(e => !e.querySelector('mjx-container svg'))
                            .map(e => e.textContent.slice(0, 80));
  const clone = document.querySelector('main, article, body').cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, mjx-container, .highlight')
       .forEach(e => e.remove());
  const text = clone.textContent;
  const rawTex = [];
  for (const m of text.matchAll(/\\$/g)) {  // a dollar left in prose is unparsed math
    rawTex.push(text.slice(Math.max(0, m.index - 30), m.index + 40));
  }
  const texRe = new RegExp(/\\$\\$|\\\\\\(|\\\\\\[|\\\\begin\\{|\\\\frac|/.source
                           + /\\$[^$\\s][^$]*\\\\[a-zA-Z]+[^$]*\\$/.source, 'g');
  for (const m of text.matchAll(texRe)) {
    rawTex.push(text.slice(Math.max(0, m.index - 30), m.index + 40));
  }
  // A glued object pasted as its Python repr (e.g. a Markdown object or a Figure pasted as text).
  const full = (document.querySelector('main, article, body')).textContent;
  const reprRe = new RegExp(/<IPython\\.core\\.display\\.\\w+ object>|/.source
                            + /<Figure size \\d[^>]*>|object at 0x[0-9a-f]+>/.source, 'g');
  const reprs = [...full.matchAll(reprRe)]
                  .map(m => full.slice(Math.max(0, m.index - 30), m.index + 50));
  return {
    reprs: reprs,
    title: document.title,
    h1: [...document.querySelectorAll('h1')].map(h => h.textContent.trim()),
    images: imgs.map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0})),
    nMath: mathEls.length,
    nSvg: document.querySelectorAll('mjx-container svg').length,
    mathErrors: document.querySelectorAll('mjx-merror, [data-mjx-error]').length,
    unrendered: unrendered,
    rawTex: rawTex,
    tables: document.querySelectorAll('table').length,
  };
}
"""


# At the current viewport: how much wider than the screen the page is, and the widest culprits.
OVERFLOW_JS = """
() => {
  const width = document.documentElement.clientWidth;
  const scrolled = e => {  // inside a box that scrolls or clips: cannot widen the page
    for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
      if (getComputedStyle(a).overflowX !== 'visible') return true;
    }
    return false;
  };
  const over = [...document.querySelectorAll('body *')].filter(e => {
    const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    return s.position !== 'fixed' && !scrolled(e) && (r.right > width + 1 || (
      s.overflowX === 'visible' && e.clientWidth > 0 && r.left + e.scrollWidth > width + 1));
  });
  const deepest = over.filter(e => !over.some(o => o !== e && e.contains(o)));
  return {excess: document.documentElement.scrollWidth - width,
          culprits: deepest.slice(0, 3).map(e => `<${e.tagName.toLowerCase()} class="${
            e.className}">${(e.textContent || '').trim().slice(0, 40)}`)};
}
"""


def _slug(doc: str) -> str:
    return doc.replace("/", "__")


@pytest.fixture(scope="module")
def html_dir() -> Path:
    from book_build import built_book_html

    return built_book_html()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def test_every_toc_page_renders_offline(html_dir: Path, browser) -> None:
    allow = load_allowlist()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for old in SCREENSHOTS.glob("*.png"):
        old.unlink()
    failures: list[str] = []
    docs = toc_files(globs_in=html_dir)  # every page, the seeded run pages included
    assert any(doc.startswith("book/pages/01_dyck1/") for doc in docs), "no run page found"
    for doc in docs:
        page_file = html_dir / f"{doc}.html"
        if not page_file.is_file():
            failures.append(f"{doc}: no HTML page")
            continue
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        network: list[str] = []
        console: list[str] = []

        def block_remote(route, network=network):
            url = route.request.url
            if url.startswith(LOCAL_SCHEMES):
                route.continue_()
            else:  # record and refuse: the book must not need the network
                network.append(url)
                route.abort()

        context.route("**/*", block_remote)
        page = context.new_page()
        page.on("console", lambda m, c=console: c.append(f"{m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e, c=console: c.append(f"pageerror: {e}"))
        page.on("requestfailed", lambda r, c=console: c.append(
            f"requestfailed: {r.url}") if r.url.startswith("file:") else None)
        page.goto(page_file.as_uri(), wait_until="load")
        info = page.evaluate(INSPECT_JS)
        page.screenshot(path=str(SCREENSHOTS / f"{_slug(doc)}.png"), full_page=True)
        page.set_viewport_size(PHONE)
        wide = page.evaluate(OVERFLOW_JS)
        if wide["excess"] > 1:
            page.screenshot(path=str(SCREENSHOTS / f"{_slug(doc)}@375px.png"), full_page=True)
        context.close()

        where = f"{doc}:"
        if not info["h1"]:
            failures.append(f"{where} no <h1> heading")
        failures += [f"{where} image not loaded: {i['src']}" for i in info["images"] if not i["ok"]]
        if info["nMath"] and info["nSvg"] < info["nMath"]:
            failures.append(f"{where} {info['nMath']} math elements, {info['nSvg']} SVG "
                            f"renderings; unrendered: {info['unrendered'][:3]}")
        if info["mathErrors"]:
            failures.append(f"{where} {info['mathErrors']} MathJax errors")
        failures += [f"{where} raw TeX in text: {t!r}" for t in info["rawTex"]]
        failures += [f"{where} a Python repr instead of content: {t!r}" for t in info["reprs"]]
        failures += [f"{where} network request: {u}" for u in network]
        failures += [f"{where} console {m}" for m in console if not any(p.search(m) for p in allow)]
        if wide["excess"] > 1:
            failures.append(f"{where} {wide['excess']} px wider than a 375 px screen: "
                            f"{wide['culprits']}")
        if "summary" in doc and not info["tables"]:
            failures.append(f"{where} the summary page has no table")
    assert not failures, "\n".join(failures)
    assert len(list(SCREENSHOTS.glob("*.png"))) >= len(docs)


def test_math_pages_use_local_svg_mathjax(html_dir: Path, browser) -> None:
    """The Transformer chapter is math-heavy: MathJax must come from _static and output SVG."""
    context = browser.new_context()
    requested: list[str] = []
    context.on("request", lambda r: requested.append(r.url))
    page = context.new_page()
    page.goto((html_dir / "book" / "transformer.html").as_uri(), wait_until="load")
    n_svg = page.evaluate(
        "async () => { await MathJax.startup.promise; "
        "return document.querySelectorAll('mjx-container[jax=\"SVG\"] svg').length; }"
    )
    context.close()
    assert n_svg >= 10
    mathjax = [u for u in requested if "mathjax" in u.lower()]
    assert mathjax and all(u.startswith("file:") and "/_static/mathjax/" in u for u in mathjax)


def test_landing_page_footer_logo_favicon_and_notebook_download(html_dir: Path, browser) -> None:
    """What a visitor of the published site sees on every page, and a run's page offers."""
    page = browser.new_page()
    landing = html_dir / f"{toc_files()[0]}.html"
    page.goto(landing.as_uri(), wait_until="load")
    note = " ".join(page.locator(".build-profile").inner_text().split())
    assert f"profile {SMOKE_PROFILE} of notebooks/experiments.yml" in note
    assert "make book" in page.locator(".extra_footer").inner_text()
    assert page.evaluate("[...document.querySelectorAll('img.logo__image')]"
                         ".some(i => i.complete && i.naturalWidth > 0)")
    # one search control in view, the sidebar's (pydata-sphinx-theme 0.16+ adds a second in a
    # header band unless navbar_persistent is emptied), and it opens the search dialog
    shown = page.evaluate("[...document.querySelectorAll('.search-button__button')]"
                          ".filter(b => b.getBoundingClientRect().height > 0)"
                          ".map(b => b.closest('.bd-sidebar-primary') ? 'sidebar' : 'elsewhere')")
    assert shown == ["sidebar"], shown
    page.locator(".bd-sidebar-primary .search-button__button").first.click()
    assert page.locator("#pst-search-dialog").get_attribute("open") is not None
    page.keyboard.press("Escape")
    icon = page.get_attribute("link[rel='icon']", "href")
    assert icon and (landing.parent / icon).is_file()
    assert page.get_attribute("a[href^='https://github.com/dyckbook/dyckbook']", "href")
    run = next(p for p in sorted((html_dir / "book" / "pages").rglob("*.html"))
               if "chapters" not in p.parts)
    page.goto(run.as_uri(), wait_until="load")
    download = page.get_attribute("a[href$='.ipynb']", "href")
    notebook = json.loads((run.parent / download).read_text())
    assert any(c.get("outputs") for c in notebook["cells"] if c["cell_type"] == "code")
    page.close()


# Every word of a table's first column and of its inline code whose letters the browser set on
# more than one line (its characters' boxes at more than one height).
SPLIT_WORDS_JS = """
() => {
  const split = [];
  const cells = document.querySelectorAll('.bd-article table td:first-child, .bd-article td code');
  for (const cell of cells) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/[A-Za-z0-9_]{4,}/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].filter(r => r.width > 0)
                                                         .map(r => Math.round(r.top)));
        if (tops.size > 1) split.push(m[0]);
      }
    }
  }
  return split;
}
"""


def test_identifiers_in_tables_are_never_broken_mid_word(html_dir: Path, browser) -> None:
    """Issue 54: the verdict tables showed `bidire / ctional_k1` and digests cut in two."""
    for width in (1280, PHONE["width"]):
        page = browser.new_page(viewport={"width": width, "height": 900})
        for name in ("book/pages/chapters/re_examining_thesis", "book/pages/90_summary/summary"):
            page.goto((html_dir / f"{name}.html").as_uri(), wait_until="load")
            assert page.evaluate(SPLIT_WORDS_JS) == [], (name, width)
        page.close()
