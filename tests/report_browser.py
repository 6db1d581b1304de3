"""Open the report page in headless Chromium (Playwright, Debian's chromium): every section and chart
rendered, no console error, a screenshot saved next to the page.

Also a command: ``python tests/report_browser.py results/report/index.html`` checks a real run's page.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def check_page(browser, page_file: Path, screenshot: Path, timeout_ms: int = 60_000) -> dict:
    """Load ``page_file`` from the file system and wait for every chart; returns what was found:
    ``sections`` (id -> number of figures and tables), ``warnings`` (id -> number of visible warnings),
    ``charts``, ``rendered``, ``errors`` (console errors, page errors and failed requests) and ``screenshot``;
    the claims section and the first warning are also saved as ``<screenshot stem>-claims.png`` and
    ``-warning.png`` when the page has them."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("requestfailed", lambda request: errors.append(f"request failed: {request.url}"))
    page.goto(page_file.resolve().as_uri())
    page.wait_for_selector("body[data-charts-rendered]", state="attached", timeout=timeout_ms)
    sections = {
        section.get_attribute("id"): section.locator("figure, .table-block").count()
        for section in page.locator("main > section").all()
    }
    warnings = {
        section.get_attribute("id"): sum(w.is_visible() for w in section.locator(".warning").all())
        for section in page.locator("main > section").all()
    }
    shots = {}
    for name, selector in (("claims", "#claims"), ("warning", ".warning")):
        if page.locator(selector).count():
            shots[name] = screenshot.with_name(f"{screenshot.stem}-{name}.png")
            page.locator(selector).first.screenshot(path=str(shots[name]))
    charts = page.locator(".chart").count()
    rendered = page.locator(".chart[data-rendered='true']:has(svg.marks)").count()
    page.screenshot(path=str(screenshot), full_page=True)
    page.close()
    return {"sections": sections, "warnings": warnings, "charts": charts, "rendered": rendered, "errors": errors,
            "screenshot": screenshot, "shots": shots}


def main(page_file: str) -> int:
    from playwright.sync_api import sync_playwright

    path = Path(page_file)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        found = check_page(browser, path, path.with_name("screenshot.png"))
        browser.close()
    for section, items in found["sections"].items():
        print(f"{section}: {items} figures and tables, {found['warnings'][section]} warnings")
    print(f"charts rendered: {found['rendered']} of {found['charts']}; errors: {found['errors'] or 'none'}")
    print(f"page {path.stat().st_size / 1e6:.2f} MB; screenshot {found['screenshot']}; details {list(found['shots'].values())}")
    return 0 if not found["errors"] and found["rendered"] == found["charts"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
