"""The report page: its HTML (escaping, inert script data, navigation, tables, the template's whitespace kept
out of the page), and the smoke run's page in headless Chromium (every section and chart rendered, no console
error, a screenshot) with its head atlas."""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest

from bertology_core.report import report
from report_browser import check_page


def test_figure_caption_moves_from_the_spec_to_the_page(tmp_path):
    spec = {"title": {"text": "T", "subtitle": ["what it shows", "config"], "anchor": "start"}, "mark": "point"}
    (tmp_path / "f.vl.json").write_text(json.dumps(spec))
    figure = report.load_figure(tmp_path / "f.vl.json")
    assert figure.title == "T" and figure.caption == ("what it shows", "config")
    assert figure.spec["title"] == {"text": "T", "anchor": "start"}


def test_page_escapes_text_and_keeps_script_data_inert():
    table = report.Table("t <b>", "c", pl.DataFrame({"name": ["<script>alert(1)</script>"], "x": [0.5]}))
    figure = report.Figure("f", ("a & b",), {"mark": "point", "description": "</script><script>alert(2)"})
    page = report.render_page("title", ["sub"], [report.Section("s", "S", "intro", [figure, table], ["missing x"])], "/*js*/")
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "</script><script>alert(2)" not in page  # the spec JSON cannot close its script element
    assert "a &amp; b" in page and "missing x" in page and 'data-numeric="1"' in page


HOSTILE = "<b>x</b> & \"q\" 'a' </script><script>alert(1)</script> {{ t }} {% raw %} \u00e9"


class _Elements(HTMLParser):
    """(tag, attributes, text) of every element, text unescaped: what a browser would show."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str | None], str]] = []
        self.open: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs), ""))
        if tag not in ("br", "input", "meta"):
            self.open.append(len(self.found) - 1)

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            if self.found[self.open.pop()][0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for index in self.open:
            tag, attrs, text = self.found[index]
            self.found[index] = (tag, attrs, text + data)

    def all(self, tag: str, **attrs: str) -> list[tuple[dict[str, str | None], str]]:
        return [(a, text) for t, a, text in self.found if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def _parse(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    parser.close()
    return parser


def _hostile_page() -> tuple[str, list[report.Section]]:
    spec = {"mark": "point", "description": "</script><script>alert(2)</script>", "datasets": {
        "d": [{"task": "MRPC", "s": "</SCRIPT><!--"}, {"task": "STS-B <&>", "s": "\u2603"}]}}
    frame = pl.DataFrame({HOSTILE: [HOSTILE, None], "x": [1 / 3, None], "n": [3, None], "b": [True, None]})
    sections = [
        report.Section("one", f"{HOSTILE}: after the colon", HOSTILE, [
            report.Figure(HOSTILE, (HOSTILE, "second line"), spec, source=f"results/{HOSTILE}.vl.json"),
            report.Table(HOSTILE, HOSTILE, frame, source=HOSTILE),
        ], missing=[HOSTILE], warnings=[HOSTILE]),
        report.Section("two", "Plain", "intro", [report.Figure("single task", (), {"datasets": {"d": [{"task": "A"}]}})]),
    ]
    return report.render_page(HOSTILE, [HOSTILE, "line 2"], sections, "/*bundle*/"), sections


def test_page_shows_hostile_text_as_text_everywhere_escaped_as_html_escape_does():
    page, _ = _hostile_page()
    found = _parse(page)
    assert "<script>alert(1)" not in page and "<b>x</b>" not in page
    # html.escape's entities, as the page always had, not markupsafe's &#34; and &#39;
    assert html.escape(HOSTILE) in page and "&#34;" not in page and "&#39;" not in page
    assert [text for _, text in found.all("title")] == [HOSTILE]
    assert [text for _, text in found.all("h1")] == [HOSTILE]
    assert [text for _, text in found.all("p") if text in (HOSTILE, "line 2")][:2] == [HOSTILE, "line 2"]
    assert [text for _, text in found.all("h2")] == [f"{HOSTILE}: after the colon", "Plain"]
    assert [text for _, text in found.all("p", **{"class": "intro"})] == [HOSTILE, "intro"]
    assert [text for _, text in found.all("div", **{"class": "warning"})] == [f"Warning: {HOSTILE}"]
    assert [text for _, text in found.all("p", **{"class": "missing"})] == [HOSTILE]
    assert [text for _, text in found.all("h3")] == [HOSTILE]
    caption = found.all("figcaption")[0][1]
    assert caption.startswith(f"{HOSTILE}. {HOSTILE}second line") and f"Files: results/{HOSTILE}.{{vl.json,png}}" in caption
    assert found.all("th")[0][0]["title"] == f"sort by {HOSTILE}"
    assert found.all("input", **{"class": "filter"})[0][0]["aria-label"] == f"filter {HOSTILE}"


def test_chart_specs_cannot_close_their_script_element_and_read_back_as_given():
    page, sections = _hostile_page()
    assert "</script><script>alert(2)" not in page and "</SCRIPT><!--" not in page
    # the parser ends a script element at the first "</script": the whole JSON must come before it
    specs = json.loads(_parse(page).all("script", id="chart-specs")[0][1])
    assert specs == {"one-0": sections[0].items[0].spec, "two-0": sections[1].items[0].spec}
    assert [a["id"] for a, _ in _parse(page).all("div", **{"class": "chart"})] == list(specs)


def test_nav_links_every_section_by_its_title_before_the_colon():
    page, _ = _hostile_page()
    nav = _parse(page).all("a")
    assert [(a["href"], text) for a, text in nav] == [("#one", HOSTILE), ("#two", "Plain")]
    assert [a["id"] for a, _ in _parse(page).all("section")] == ["one", "two"]


def test_figure_with_tasks_gets_a_task_choice_and_one_with_a_single_task_none():
    page, _ = _hostile_page()
    found = _parse(page)
    assert [a["data-chart"] for a, _ in found.all("select")] == ["one-0"]
    assert [text for _, text in found.all("option")] == ["all", "MRPC", "STS-B <&>"]


def test_table_cells_show_the_format_and_sort_on_the_full_value():
    page, _ = _hostile_page()
    found = _parse(page)
    assert [(a["data-numeric"], text) for a, text in found.all("th")] == [("0", HOSTILE), ("1", "x"), ("1", "n"), ("0", "b")]
    cells = [(a["data-key"], text) for a, text in found.all("td")]
    assert cells == [(HOSTILE, HOSTILE), (repr(1 / 3), "0.333"), ("3", "3"), ("1", "true")] + [("", "")] * 4
    assert [text for _, text in found.all("span", **{"class": "count"})] == ["2 rows"]


def test_table_with_max_rows_says_where_the_others_are():
    table = report.Table("t", "", pl.DataFrame({"x": [1, 2, 3]}), source="results/t <1>.csv")
    assert "First 2 of 3 rows; all rows in results/t &lt;1&gt;.csv.</p>" in report.table_html(table, "t", max_rows=2)
    assert ">2 rows<" in report.table_html(table, "t", max_rows=2)
    assert "First" not in report.table_html(table, "t", max_rows=3) and "First" not in report.table_html(table, "t")


def test_template_line_breaks_stay_out_of_the_page_and_style_and_script_are_embedded_as_they_are():
    page, _ = _hostile_page()
    folder = Path(report.__file__).with_name("page")
    style, script = (folder / "page.css").read_text(), (folder / "page.js").read_text()
    assert page.startswith('<!DOCTYPE html>\n<html lang="en">') and page.endswith("</script></body></html>\n")
    assert f"<style>\n{style}</style>" in page and f"<script>\n{script}</script></body>" in page
    body = page.split("<body>", 1)[1].split('<script type="application/json"', 1)[0]
    assert "\n" not in body.replace(HOSTILE, "")  # only the text's own line breaks (none here)
    # the page's own line breaks: after the doctype, <style> and the page script's <script>, and at the end
    assert report.render_page("t", [], [], "").count("\n") == 4 + style.count("\n") + script.count("\n")


LAYOUT_FILE = Path(__file__).resolve().parents[1] / "report" / "layout.yaml"


def test_every_section_and_table_of_the_layout_is_one_a_stage_declares():
    """The layout only orders: each section it names is one a stage declares and has its text; every section a stage
    declares is titled by it (the layout holds no title or note)."""
    import yaml

    from bertology_core.workflow import jobs
    from test_jobs import load_config

    sections = jobs.experiment(load_config(), LAYOUT_FILE.parents[1]).sections()
    data = yaml.safe_load(LAYOUT_FILE.read_text())
    anchors = {section.anchor for section in sections}
    stems = {summary.stem for section in sections for summary in section.summaries}
    assert set(data) == {"sections"} and set(data["sections"]) == anchors
    for anchor in data["sections"]:
        assert (LAYOUT_FILE.parent / "sections" / f"{anchor}.rst").is_file(), anchor
    assert all(section.title for section in sections)
    # the notes a reader needs sit beside the summaries they explain
    assert "pruning/{model}/summary/lottery" in stems
    assert next(m for s in sections for m in s.summaries if m.stem == "pruning/{model}/summary/lottery").note


def test_layout_orders_declared_sections_and_presents_unknown_ones_after_by_their_anchor(tmp_path):
    layout_file = tmp_path / "layout.yaml"
    layout_file.write_text("sections:\n- b\n- a\n")
    text = tmp_path / "b.rst"
    text.write_text("First line\nsecond line.\n\n")
    layout = report.load_layout(layout_file, [text], {"b": "Bee: second", "a": "Ay"},
                                {"x/{model}/t": ("The table", "Read it so.")})
    assert layout.ordered(["a", "new_stage", "b"]) == ["b", "a", "new_stage"]
    assert layout.title("new_stage") == "New stage" and layout.texts == {"b": "First line second line."}
    assert layout.table_title("x/{model}/t") == "The table" and layout.table_note("x/{model}/t") == "Read it so."
    assert layout.table_title("x/{model}/other_one") == "Other one" and layout.table_note("x/{model}/other_one") == ""
    from bertology_core.summaries import figures

    results = tmp_path / "results"
    (results / "x" / "m").mkdir(parents=True)
    # a table is written once, as Parquet (which keeps its note) and CSV
    figures.write_table(pl.DataFrame({"v": [1]}), results / "x" / "m" / "t", note="Kept with the table.")
    assert sorted(p.name for p in (results / "x" / "m").iterdir()) == ["t.csv", "t.parquet"]
    declared = {"a": [], "new_stage": [("table", "x/{model}/t")], "b": [("table", "x/{model}/gone")]}
    available = {str(results / "x" / "m" / "t.parquet")}
    sections = report.build_sections(results, ["m"], available, declared, layout)
    assert [(s.anchor, s.title) for s in sections] == [("b", "Bee: second"), ("a", "Ay"), ("new_stage", "New stage")]
    assert sections[0].intro == "First line second line." and sections[0].missing == ["x/m/gone: not computed for m in this config."]
    table = sections[2].items[0]
    assert table.title == "The table" and table.source == str(results / "x" / "m" / "t.csv")
    assert table.caption == f"From {results}/x/m/t.{{parquet,csv}}. Kept with the table. Read it so."


def test_a_layout_that_does_more_than_order_is_refused_naming_the_file(tmp_path):
    layout_file = tmp_path / "layout.yaml"
    layout_file.write_text("sections:\n- {anchor: a, title: A}\n")
    with pytest.raises(ValueError, match="layout.yaml: .*Fix: the layout only orders the sections"):
        report.load_layout(layout_file)
    layout_file.write_text("sections: [a]\ntables: {x: {title: T}}\n")
    with pytest.raises(ValueError, match=r"layout.yaml: the field\(s\) \['tables'\]"):
        report.load_layout(layout_file)


def test_table_counts_its_rows_in_words():
    one = report.table_html(report.Table("t", "", pl.DataFrame({"x": [1]})), "t1")
    two = report.table_html(report.Table("t", "", pl.DataFrame({"x": [1, 2]})), "t2")
    assert ">1 row<" in one and ">2 rows<" in two


@pytest.mark.workflow
def test_smoke_report_page_shows_every_section_and_chart_in_headless_chromium(smoke_run, browser):
    page_file = smoke_run / "results" / "report" / "index.html"
    found = check_page(browser, page_file, page_file.with_name("screenshot.png"))
    assert found["errors"] == []
    import yaml

    expected = yaml.safe_load(LAYOUT_FILE.read_text())["sections"]  # the layout orders the sections by their anchors
    assert list(found["sections"]) == expected
    assert all(found["sections"][anchor] > 0 for anchor in expected), found["sections"]  # the smoke config runs every stage
    assert found["charts"] == found["rendered"] >= 14
    assert found["screenshot"].stat().st_size > 50_000
    # every smoke model is unfit: each section that shows a fine-tuned model's results warns, visibly
    shows_fine_tuned = {"baselines", "claims", "patterns", "attention_change", "linguistic", "disabling", "pruning", "probing",
                        "head_roles", "outliers", "layer_mix", "report"}
    assert {anchor for anchor, count in found["warnings"].items() if count} == shows_fine_tuned
    assert {"claims", "warning"} <= set(found["shots"]) and all(p.stat().st_size > 5_000 for p in found["shots"].values())

    # the per-task choice redraws a figure with that task's rows only (smoke tasks: MRPC, STS-B)
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_file.as_uri())
    page.wait_for_selector("body[data-charts-rendered]", state="attached")
    assert page.locator("select[data-chart]").count() >= 8
    labels = "Array.from(document.querySelectorAll('#attention_change-0 svg text')).map(e => e.textContent)"
    assert {"MRPC", "STS-B"} <= set(page.evaluate(labels))
    page.select_option("select[data-chart='attention_change-0']", "STS-B")
    page.wait_for_selector("#attention_change-0[data-rendered='true']")
    shown = set(page.evaluate(labels))
    assert "STS-B" in shown and "MRPC" not in shown and errors == []
    page.close()
    atlas = pl.read_parquet(smoke_run / "results" / "report" / "tiny-bert" / "head_atlas.parquet")
    assert atlas.height == 2 * 2 * 2 * 4  # tasks x states x layers x heads of the tiny model
    assert {"pattern", "cosine_to_pre_trained", "disabling_delta", "importance", "best_relation"} <= set(atlas.columns)
