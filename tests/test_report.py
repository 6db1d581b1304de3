"""The report page and the head atlas: the join by hand on small tables, the page's HTML, and the smoke
run's page in headless Chromium (every section and chart rendered, no console error, a screenshot)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from bertology_core import report
from report_browser import check_page


def _grid(task: str, layers: int = 2, heads: int = 3, **columns) -> pl.DataFrame:
    rows = [{"task": task, "layer": l, "head": h} for l in range(layers) for h in range(heads)]
    frame = pl.DataFrame(rows)
    return frame.with_columns(**{k: pl.Series(v) for k, v in columns.items()})


def test_head_atlas_joins_every_per_head_table_on_task_state_layer_and_head():
    patterns = pl.concat([
        _grid("MRPC", dominant_class=["vertical"] * 6, share=[0.5] * 6).with_columns(dump=pl.lit("MRPC/untuned")),
        _grid("MRPC", dominant_class=["block"] * 6, share=[0.9] * 6).with_columns(dump=pl.lit("MRPC/pretrained_seed2")),
        _grid("MRPC", dominant_class=["diagonal"] * 6, share=[0.7] * 6).with_columns(dump=pl.lit("MRPC/pretrained_seed1")),
    ]).drop("task")
    features = pl.concat([
        _grid("MRPC", score=[0.1 * i for i in range(6)]).with_columns(model_state=pl.lit(state), feature=pl.lit(feature))
        for state in ("pre-trained", "fine-tuned", "difference") for feature in ("[CLS]", "noun")
    ])
    cosine = _grid("MRPC", cosine=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    disabling = _grid("MRPC", delta=[-0.1] * 6, ci_low=[-0.2] * 6, ci_high=[0.0] * 6, verdict=["loss"] * 6).with_columns(mode=pl.lit("zero"))
    importance = pl.concat([
        _grid("MRPC", normalized_mean=[1.0, 2, 3, 4, 5, 6]).with_columns(element=pl.lit("head")),
        _grid("MRPC", layers=2, heads=1, normalized_mean=[9.0, 9]).with_columns(element=pl.lit("mlp")),
    ])
    survival = pl.concat([
        _grid("MRPC", survival=[1.0, 0.5, 0, 0, 0, 1]).with_columns(method=pl.lit("s"), element=pl.lit("head")),
        _grid("MRPC", survival=[0.0] * 6).with_columns(method=pl.lit("m"), element=pl.lit("attention.self.query")),
    ])
    # L0H0 of the pre-trained model: obj beats its baseline by 0.5, det by 0.1 -> obj
    relations = pl.DataFrame({
        "state": ["untuned", "untuned", "untuned", "MRPC_seed1"], "relation": ["obj", "det", "all", "det"],
        "direction": ["dep->head", "head<-dep", "dep->head", "dep->head"], "layer": [0, 0, 0, 1], "head": [0, 0, 0, 2],
        "accuracy": [0.9, 0.95, 0.99, 0.8], "words": [100] * 4,
    })
    best = pl.DataFrame({"state": ["untuned", "untuned", "MRPC_seed1"], "relation": ["obj", "det", "det"],
                         "baseline_accuracy": [0.4, 0.85, 0.5]})

    atlas = report.head_atlas("m", patterns=patterns, cosine=cosine, features=features, disabling=disabling,
                              importance=importance, survival=survival, relations=relations, best_relations=best)

    assert atlas.height == 12  # 1 task x 2 states x 2 layers x 3 heads
    assert atlas.select("task", "state", "layer", "head").n_unique() == 12
    row = lambda state, layer, head: atlas.filter((pl.col("state") == state) & (pl.col("layer") == layer) & (pl.col("head") == head)).row(0, named=True)  # noqa: E731
    pre, tuned = row("pre-trained", 0, 0), row("fine-tuned", 1, 2)
    assert pre["name"] == "L1H1" and tuned["name"] == "L2H3" and pre["model"] == "m"
    assert (pre["pattern"], pre["pattern_share"]) == ("vertical", 0.5)
    assert tuned["pattern"] == "diagonal"  # the first seed's dump, not seed 2's
    assert pre["attn_cls"] == pytest.approx(0.0) and tuned["attn_noun"] == pytest.approx(0.5)
    assert pre["cosine_to_pre_trained"] is None and tuned["cosine_to_pre_trained"] == pytest.approx(0.4)
    assert (tuned["disabling_delta"], tuned["disabling_ci_low"], tuned["disabling_verdict"]) == (-0.1, -0.2, "loss")
    assert tuned["importance"] == 6.0 and pre["importance"] is None  # heads only, fine-tuned rows only
    assert tuned["survival_s_pruning"] == 1.0 and row("fine-tuned", 0, 1)["survival_s_pruning"] == 0.5
    assert (pre["best_relation"], pre["relation_direction"], pre["relation_accuracy"]) == ("obj", "dep->head", 0.9)
    assert tuned["best_relation"] == "det" and tuned["relation_baseline"] == 0.5
    assert row("fine-tuned", 0, 0)["best_relation"] is None
    assert atlas.columns[:6] == list(report.ATLAS_KEYS)


def test_head_atlas_keeps_only_the_stages_given():
    atlas = report.head_atlas("m", cosine=_grid("RTE", cosine=[0.5] * 6))
    assert atlas.height == 6 and set(atlas["state"]) == {"fine-tuned"}
    assert "pattern" not in atlas.columns and "importance" not in atlas.columns
    with pytest.raises(ValueError, match="no numeric column"):
        report.atlas_chart(atlas.drop("cosine_to_pre_trained"), "caption")


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


def test_every_layout_stem_is_one_the_workflow_declares():
    """The page's layout names files other rules write: each stem must appear in a rule's outputs."""
    from conftest import REPO

    rules = "".join(p.read_text() for p in (REPO / "rules").glob("*.smk"))
    for _, kind, stem in report.report_stems("{model}"):
        assert f'"results/{stem}"' in rules or f'"results/{stem}.parquet"' in rules, (kind, stem)


def test_table_notes_belong_to_tables_of_the_layout():
    """A renamed stem must not silently drop the note a reader needs to read its table."""
    tables = {stem for _, kind, stem in report.report_stems("{model}") if kind == "table"}
    assert set(report.TABLE_NOTES) <= tables


def test_table_counts_its_rows_in_words():
    one = report.table_html(report.Table("t", "", pl.DataFrame({"x": [1]})), "t1")
    two = report.table_html(report.Table("t", "", pl.DataFrame({"x": [1, 2]})), "t2")
    assert ">1 row<" in one and ">2 rows<" in two


@pytest.mark.workflow
def test_smoke_report_page_shows_every_section_and_chart_in_headless_chromium(smoke_run, browser):
    page_file = smoke_run / "results" / "report" / "index.html"
    found = check_page(browser, page_file, page_file.with_name("screenshot.png"))
    assert found["errors"] == []
    expected = [anchor for anchor, *_ in report.LAYOUT]
    assert list(found["sections"]) == expected
    assert all(found["sections"][anchor] > 0 for anchor in expected), found["sections"]  # the smoke config runs every stage
    assert found["charts"] == found["rendered"] >= 14
    assert found["screenshot"].stat().st_size > 50_000
    # every smoke model is unfit: each section that shows a fine-tuned model's results warns, visibly
    shows_fine_tuned = {"baselines", "claims", "patterns", "change", "linguistic", "cls", "disabling", "pruning", "probing", "atlas"}
    assert {anchor for anchor, count in found["warnings"].items() if count} == shows_fine_tuned
    assert {"claims", "warning"} <= set(found["shots"]) and all(p.stat().st_size > 5_000 for p in found["shots"].values())

    # the per-task choice redraws a figure with that task's rows only (smoke tasks: MRPC, STS-B)
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_file.as_uri())
    page.wait_for_selector("body[data-charts-rendered]", state="attached")
    assert page.locator("select[data-chart]").count() >= 8
    labels = "Array.from(document.querySelectorAll('#change-0 svg text')).map(e => e.textContent)"
    assert {"MRPC", "STS-B"} <= set(page.evaluate(labels))
    page.select_option("select[data-chart='change-0']", "STS-B")
    page.wait_for_selector("#change-0[data-rendered='true']")
    shown = set(page.evaluate(labels))
    assert "STS-B" in shown and "MRPC" not in shown and errors == []
    page.close()
    atlas = pl.read_parquet(smoke_run / "results" / "report" / "tiny-bert" / "head_atlas.parquet")
    assert atlas.height == 2 * 2 * 2 * 4  # tasks x states x layers x heads of the tiny model
    assert {"pattern", "cosine_to_pre_trained", "disabling_delta", "importance", "best_relation"} <= set(atlas.columns)
