"""The report: every stage's tables and figures on one self-contained HTML page, and the head atlas.

The page embeds each figure's Vega-Lite spec (written by :func:`figures.save_chart` as ``.vl.json``)
and one copy of the Vega, Vega-Lite and Vega-Embed libraries (from vl-convert), so it opens from the
file system with no network. Tables are plain HTML, sortable (click a column) and filterable.

The head atlas joins every per-head result into one row per (task, model state, layer, head): the
dominant attention pattern (Kovaleva et al. 2019, section 4.1), the cosine similarity of the head's
attention before and after fine-tuning (4.2), its attention to [CLS], [SEP] and the linguistic features
(4.3-4.5), the score change when the head alone is disabled with its interval (4.6), Michel et al.'s
importance, its survival in Prasanna et al.'s s-pruning, and the dependency relation it tracks best
(Clark et al. 2019).
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from bertology_core.io import write_text

PRE_TRAINED, FINE_TUNED = "pre-trained", "fine-tuned"
ATLAS_KEYS = ("model", "task", "state", "layer", "head", "name")


@dataclass(frozen=True)
class Figure:
    """A figure: its Vega-Lite spec (the title kept, the caption moved out of the spec into the page)."""

    title: str
    caption: tuple[str, ...]
    spec: dict
    source: str = ""


@dataclass(frozen=True)
class Table:
    title: str
    caption: str
    frame: pl.DataFrame
    source: str = ""
    float_format: str = "{:.3f}"


@dataclass
class Section:
    anchor: str
    title: str
    intro: str
    items: list[Figure | Table] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # what this config did not compute
    warnings: list[str] = field(default_factory=list)  # shown above the items: e.g. results of unfit models


def load_figure(path: str | os.PathLike[str]) -> Figure:
    """A figure from its ``.vl.json``; the subtitle (the two-line caption) becomes the page's caption."""
    spec = json.loads(Path(path).read_text())
    title = spec.get("title", "")
    if isinstance(title, dict):
        caption = title.get("subtitle", ())
        caption = (caption,) if isinstance(caption, str) else tuple(caption)
        text = title.get("text", "")
        spec["title"] = {k: v for k, v in title.items() if k != "subtitle"}
    else:
        text, caption = str(title), ()
    return Figure(title=text if isinstance(text, str) else " ".join(text), caption=caption, spec=spec, source=str(path))


def _task_of(row: dict) -> str | None:
    """The task a data row belongs to: its ``task`` field, or the task part of a dump key ``TASK/state``."""
    if isinstance(row.get("task"), str):
        return row["task"]
    if isinstance(row.get("dump"), str) and "/" in row["dump"]:
        return row["dump"].split("/", 1)[0]
    return None


def figure_tasks(spec: dict) -> list[str]:
    """The tasks a figure can be narrowed to: those of its data rows when every row names one (two at
    least); otherwise none (the figure gets no task choice). The atlas has its own drop-down."""
    if any(param.get("name") == "task" for param in spec.get("params", [])):
        return []
    rows = [row for values in spec.get("datasets", {}).values() for row in values]
    tasks = [_task_of(row) for row in rows]
    if not rows or None in tasks:
        return []
    unique = sorted(set(tasks))  # type: ignore[arg-type]
    return unique if len(unique) > 1 else []


def _cell(value: object, float_format: str) -> tuple[str, str]:
    """(shown text, sort key) of a table cell."""
    if value is None:
        return "", ""
    if isinstance(value, float):
        return float_format.format(value), repr(value)
    if isinstance(value, bool):
        return str(value).lower(), str(int(value))
    if isinstance(value, int):
        return str(value), str(value)
    return str(value), str(value)


def table_html(table: Table, table_id: str, max_rows: int | None = None) -> str:
    """An HTML table with a filter box; every column sorts on click (numbers numerically)."""
    frame = table.frame if max_rows is None else table.frame.head(max_rows)
    numeric = {c for c, t in zip(frame.columns, frame.dtypes) if t.is_numeric()}
    head = "".join(
        f'<th data-numeric="{int(c in numeric)}" title="sort by {html.escape(c)}">{html.escape(c)}</th>' for c in frame.columns
    )
    rows = []
    for row in frame.iter_rows():
        cells = []
        for value in row:
            shown, key = _cell(value, table.float_format)
            cells.append(f'<td data-key="{html.escape(key)}">{html.escape(shown)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = "" if max_rows is None or table.frame.height <= max_rows else (
        f'<p class="note">First {max_rows} of {table.frame.height} rows; all rows in {html.escape(table.source)}.</p>'
    )
    return (
        f'<div class="table-block" id="{table_id}"><input class="filter" type="search" placeholder="filter rows" '
        f'aria-label="filter {html.escape(table.title)}"> <span class="count">{_rows(frame.height)}</span>'
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>{more}</div>'
    )


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #222; }
header { background: #1f3a5f; color: #fff; padding: 18px 32px; }
header h1 { margin: 0 0 4px; font-size: 24px; }
header p { margin: 2px 0; opacity: .9; }
nav { position: sticky; top: 0; background: #f4f6f9; border-bottom: 1px solid #d8dde5; padding: 6px 32px; z-index: 2;
      display: flex; flex-wrap: wrap; column-gap: 16px; row-gap: 2px; }
nav a { color: #1f3a5f; text-decoration: none; font-weight: 600; white-space: nowrap; }
main { padding: 8px 32px 48px; max-width: 1500px; }
section { border-bottom: 1px solid #e3e6ea; padding: 8px 0 24px; scroll-margin-top: 64px; }
h2 { margin: 18px 0 6px; }
.intro { max-width: 960px; color: #444; }
figure { margin: 18px 0; }
figcaption { color: #555; font-size: 13.5px; max-width: 1100px; }
figcaption b { color: #222; }
.chart { overflow-x: auto; max-width: 100%; }  /* vega-embed makes it inline-block: wide grids scroll inside it, not the page */
.table-block { margin: 10px 0 18px; }
.scroll { max-height: 460px; overflow: auto; border: 1px solid #d8dde5; }
table { border-collapse: collapse; font-size: 13px; }
th { position: sticky; top: 0; background: #eef1f5; cursor: pointer; text-align: left; padding: 4px 8px; }
th.asc::after { content: " \\25B2"; } th.desc::after { content: " \\25BC"; }
td { padding: 3px 8px; border-top: 1px solid #eef0f3; white-space: nowrap; }
tbody tr:hover { background: #f7f9fc; }
.note, .missing { color: #777; font-size: 13px; }
.count { color: #777; font-size: 12px; }
.filter { padding: 3px 6px; width: 260px; }
.task-choice { font-size: 13px; color: #444; }
.warning { background: #fff4d6; border: 1px solid #e0a800; border-left: 6px solid #e0a800; padding: 8px 12px;
           margin: 10px 0; max-width: 1100px; font-size: 14px; }
.warning b { color: #7a4b00; }
"""

_SCRIPT = """
const EMBED = {mode: 'vega-lite', actions: {export: true, source: false, compiled: false, editor: false}};
function taskOf(row) {
  if (typeof row.task === 'string') return row.task;
  if (typeof row.dump === 'string') return row.dump.split('/')[0];
  return null;
}
function embed(id, spec) {
  return vegaEmbed('#' + id, spec, EMBED)
    .then(() => document.getElementById(id).setAttribute('data-rendered', 'true'))
    .catch(error => { console.error('chart ' + id + ': ' + error); });
}
function renderCharts() {
  const specs = JSON.parse(document.getElementById('chart-specs').textContent);
  const done = Object.entries(specs).map(([id, spec]) => embed(id, spec));
  Promise.all(done).then(() => document.body.setAttribute('data-charts-rendered', String(done.length)));
  // per-task choice: redraw the figure from its own spec with only that task's rows
  for (const select of document.querySelectorAll('select[data-chart]')) {
    select.addEventListener('change', () => {
      const id = select.dataset.chart, spec = structuredClone(specs[id]);
      if (select.value) {
        for (const name of Object.keys(spec.datasets)) {
          spec.datasets[name] = spec.datasets[name].filter(row => taskOf(row) === select.value);
        }
      }
      document.getElementById(id).removeAttribute('data-rendered');
      embed(id, spec);
    });
  }
}
function wireTables() {
  for (const block of document.querySelectorAll('.table-block')) {
    const body = block.querySelector('tbody'), count = block.querySelector('.count');
    const rows = Array.from(body.rows);
    block.querySelector('.filter').addEventListener('input', event => {
      const needle = event.target.value.toLowerCase();
      let shown = 0;
      for (const row of rows) {
        const keep = row.textContent.toLowerCase().includes(needle);
        row.style.display = keep ? '' : 'none';
        shown += keep;
      }
      count.textContent = shown + ' of ' + rows.length + (rows.length === 1 ? ' row' : ' rows');
    });
    block.querySelectorAll('th').forEach((th, column) => th.addEventListener('click', () => {
      const ascending = !th.classList.contains('asc');
      block.querySelectorAll('th').forEach(other => other.classList.remove('asc', 'desc'));
      th.classList.add(ascending ? 'asc' : 'desc');
      const numeric = th.dataset.numeric === '1';
      const key = row => row.cells[column].dataset.key;
      const compare = numeric
        ? (a, b) => (key(a) === '' ? Infinity : Number(key(a))) - (key(b) === '' ? Infinity : Number(key(b)))
        : (a, b) => key(a).localeCompare(key(b));
      rows.sort((a, b) => ascending ? compare(a, b) : compare(b, a));
      rows.forEach(row => body.appendChild(row));
    }));
  }
}
wireTables();
renderCharts();
"""


def _script_json(data: object) -> str:
    """JSON that is safe inside a <script> element."""
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")


def render_page(title: str, subtitle: Sequence[str], sections: Sequence[Section], vega_bundle: str) -> str:
    """The whole page as one HTML string (``vega_bundle``: vl_convert.javascript_bundle())."""
    specs: dict[str, dict] = {}
    body = []
    for section in sections:
        parts = [f'<section id="{section.anchor}"><h2>{html.escape(section.title)}</h2>',
                 f'<p class="intro">{html.escape(section.intro)}</p>']
        for warning in section.warnings:
            parts.append(f'<div class="warning" role="alert"><b>Warning:</b> {html.escape(warning)}</div>')
        for number, item in enumerate(section.items):
            item_id = f"{section.anchor}-{number}"
            if isinstance(item, Figure):
                specs[item_id] = item.spec
                caption = "<br>".join(html.escape(line) for line in item.caption)
                tasks = figure_tasks(item.spec)
                choice = "" if not tasks else (
                    f'<label class="task-choice">task <select data-chart="{item_id}"><option value="">all</option>'
                    + "".join(f'<option>{html.escape(t)}</option>' for t in tasks) + "</select></label>"
                )
                parts.append(
                    f'<figure>{choice}<div class="chart" id="{item_id}"></div><figcaption><b>{html.escape(item.title)}.</b> '
                    f'{caption}<br><span class="note">Files: {html.escape(item.source.removesuffix(".vl.json"))}'
                    f'.{{html,png,svg}}</span></figcaption></figure>'
                )
            else:
                parts.append(f"<h3>{html.escape(item.title)}</h3><p class=\"note\">{html.escape(item.caption)}</p>")
                parts.append(table_html(item, item_id))
        for missing in section.missing:
            parts.append(f'<p class="missing">{html.escape(missing)}</p>')
        parts.append("</section>")
        body.append("".join(parts))
    nav = "".join(f'<a href="#{s.anchor}">{html.escape(s.title.split(":")[0])}</a>' for s in sections)
    lines = "".join(f"<p>{html.escape(line)}</p>" for line in subtitle)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
        f"<script>{vega_bundle}</script></head><body>"
        f"<header><h1>{html.escape(title)}</h1>{lines}</header><nav>{nav}</nav><main>{''.join(body)}</main>"
        f'<script type="application/json" id="chart-specs">{_script_json(specs)}</script>'
        f"<script>{_SCRIPT}</script></body></html>\n"
    )


def write_page(path: str | os.PathLike[str], title: str, subtitle: Sequence[str], sections: Sequence[Section]) -> int:
    """Render and write the page atomically; returns its size in bytes."""
    import altair as alt
    import vl_convert

    page = render_page(title, subtitle, sections, vl_convert.javascript_bundle(vl_version=".".join(alt.SCHEMA_VERSION.split(".")[:2])))
    write_text(page, path)
    return len(page.encode())


# --- the head atlas -------------------------------------------------------------------------------------


def _heads(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32))


def dump_state(dump: str) -> tuple[str, str | None]:
    """``TASK/untuned`` -> (TASK, pre-trained); ``TASK/pretrained_seedN`` -> (TASK, fine-tuned); else None."""
    task, state = dump.split("/", 1)
    if state == "untuned":
        return task, PRE_TRAINED
    if state.startswith("pretrained_seed"):
        return task, FINE_TUNED
    return task, None


def head_atlas(
    model: str,
    patterns: pl.DataFrame | None = None,
    cosine: pl.DataFrame | None = None,
    features: pl.DataFrame | None = None,
    disabling: pl.DataFrame | None = None,
    importance: pl.DataFrame | None = None,
    survival: pl.DataFrame | None = None,
    relations: pl.DataFrame | None = None,
    best_relations: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per (task, state, layer, head) of ``model`` with every per-head result available.

    Inputs are the stages' summary tables (each optional: a stage the config leaves out adds no columns):
    ``patterns`` (patterns/summary/heads: dump, layer, head, dominant_class, share; the first fine-tuned
    seed's dump stands for "fine-tuned"), ``cosine`` (attention_change/summary/cosine: task, layer, head,
    cosine), ``features`` (linguistic/summary/features: task, model_state, layer, head, feature, score),
    ``disabling`` (disabling/summary/heads: task, mode, layer, head, delta, ci_low, ci_high, verdict),
    ``importance`` (pruning/summary/importance: task, element, layer, head, normalized_mean), ``survival``
    (pruning/summary/survival: task, method, element, layer, head, survival), ``relations`` (probing
    head_relations: state, relation, direction, layer, head, accuracy) with ``best_relations`` (probing
    syntactic_heads: state, relation, baseline_accuracy). Layers and heads are 0-based; ``name`` is the
    1-based ``L<layer>H<head>`` the papers and the disabling tables print."""
    keys = ["task", "state", "layer", "head"]
    parts: list[pl.DataFrame] = []
    if patterns is not None and patterns.height:
        mapped = patterns.with_columns(
            pl.col("dump").map_elements(lambda d: dump_state(d)[0], return_dtype=pl.String).alias("task"),
            pl.col("dump").map_elements(lambda d: dump_state(d)[1], return_dtype=pl.String).alias("state"),
            pl.col("dump").str.extract(r"_seed(\d+)$").cast(pl.Int64).fill_null(0).alias("_seed"),
        ).drop_nulls("state")
        first = mapped.sort("_seed").group_by(["task", "state", "layer", "head"], maintain_order=True).first()
        parts.append(_heads(first.select(*keys, pl.col("dominant_class").alias("pattern"), pl.col("share").alias("pattern_share"))))
    if features is not None and features.height:
        wide = features.filter(pl.col("model_state").is_in([PRE_TRAINED, FINE_TUNED])).pivot(
            on="feature", index=["task", "model_state", "layer", "head"], values="score"
        ).rename({"model_state": "state"})
        wide = wide.rename({c: f"attn_{c.strip('[]').lower()}" for c in wide.columns if c not in keys})
        parts.append(_heads(wide))
    frame = _outer_join(parts, keys)
    if frame is None:
        # no per-state table: fine-tuned rows from the per-task tables alone
        frame = pl.DataFrame(schema={"task": pl.String, "state": pl.String, "layer": pl.Int32, "head": pl.Int32})

    fine_tuned: list[pl.DataFrame] = []
    if cosine is not None and cosine.height:
        fine_tuned.append(_heads(cosine.select("task", "layer", "head", pl.col("cosine").alias("cosine_to_pre_trained"))))
    if disabling is not None and disabling.height:
        for mode in sorted(disabling["mode"].unique()):
            prefix = "disabling" if disabling["mode"].n_unique() == 1 else f"disabling_{mode}"
            fine_tuned.append(_heads(disabling.filter(pl.col("mode") == mode).select(
                "task", "layer", "head", pl.col("delta").alias(f"{prefix}_delta"), pl.col("ci_low").alias(f"{prefix}_ci_low"),
                pl.col("ci_high").alias(f"{prefix}_ci_high"), pl.col("verdict").alias(f"{prefix}_verdict"),
            )))
    if importance is not None and importance.height:
        fine_tuned.append(_heads(importance.filter(pl.col("element") == "head").select(
            "task", "layer", "head", pl.col("normalized_mean").alias("importance"))))
    if survival is not None and survival.height:
        heads = survival.filter((pl.col("element") == "head") & (pl.col("method") == "s"))
        if heads.height:
            fine_tuned.append(_heads(heads.select("task", "layer", "head", pl.col("survival").alias("survival_s_pruning"))))
    per_task = _outer_join(fine_tuned, ["task", "layer", "head"])
    if per_task is not None:
        per_task = per_task.with_columns(pl.lit(FINE_TUNED).alias("state"))
        frame = frame.join(per_task, on=keys, how="full", coalesce=True)

    if relations is not None and relations.height and best_relations is not None and best_relations.height:
        frame = frame.join(_best_relation_per_head(relations, best_relations, frame), on=keys, how="left")
    return frame.with_columns(
        pl.lit(model).alias("model"),
        pl.format("L{}H{}", pl.col("layer") + 1, pl.col("head") + 1).alias("name"),
    ).select(*ATLAS_KEYS, pl.exclude(*ATLAS_KEYS)).sort("task", "state", "layer", "head", descending=[False, True, False, False])


def _outer_join(frames: list[pl.DataFrame], keys: list[str]) -> pl.DataFrame | None:
    if not frames:
        return None
    joined = frames[0]
    for frame in frames[1:]:
        joined = joined.join(frame, on=keys, how="full", coalesce=True)
    return joined


def _best_relation_per_head(relations: pl.DataFrame, best: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """Per head and probed state, the relation (of those the syntactic-head table scores) where the head beats
    that relation's best fixed-offset baseline by most, over both directions. The pre-trained state's answer
    holds for every task's pre-trained rows; ``TASK_seedN`` answers for that task's fine-tuned rows (first seed)."""
    scored = relations.filter(pl.col("relation") != "all").join(
        best.select("state", "relation", "baseline_accuracy"), on=["state", "relation"], how="inner"
    ).with_columns((pl.col("accuracy") - pl.col("baseline_accuracy")).alias("margin"))
    top = scored.sort("margin", descending=True).group_by(["state", "layer", "head"], maintain_order=True).first()
    top = _heads(top.select(
        "state", "layer", "head", pl.col("relation").alias("best_relation"), pl.col("direction").alias("relation_direction"),
        pl.col("accuracy").alias("relation_accuracy"), pl.col("baseline_accuracy").alias("relation_baseline"),
    ))
    out = []
    tasks = rows["task"].unique().to_list() if rows.height else []
    pre = top.filter(pl.col("state") == "untuned")
    if pre.height:
        out += [pre.with_columns(pl.lit(task).alias("task"), pl.lit(PRE_TRAINED).alias("state")) for task in tasks]
    tuned = top.filter(pl.col("state").str.contains(r"_seed\d+$")).with_columns(
        pl.col("state").str.extract(r"^(.*)_seed\d+$").alias("task"),
        pl.col("state").str.extract(r"_seed(\d+)$").cast(pl.Int64).alias("_seed"),
    ).sort("_seed").group_by(["task", "layer", "head"], maintain_order=True).first().drop("_seed").with_columns(
        pl.lit(FINE_TUNED).alias("state"))
    if tuned.height:
        out.append(tuned)
    if not out:
        return pl.DataFrame(schema={"task": pl.String, "state": pl.String, "layer": pl.Int32, "head": pl.Int32})
    return pl.concat([o.select("task", "state", "layer", "head", pl.exclude("task", "state", "layer", "head")) for o in out])


def atlas_chart(atlas: pl.DataFrame, caption: str):
    """Layer x head maps of one atlas measure at a time (a drop-down picks it, another the task), one panel
    per model state; the tooltip shows the head's whole atlas row."""
    import altair as alt  # (imported here: the workflow reads this module's LAYOUT when it parses)

    measures = [c for c, t in zip(atlas.columns, atlas.dtypes) if t.is_float() and not c.endswith(("_ci_low", "_ci_high"))]
    if not measures:
        raise ValueError("the head atlas has no numeric column to draw")
    tasks = sorted(atlas["task"].unique().to_list())
    data = atlas.with_columns((pl.col("layer") + 1).alias("Layer"), (pl.col("head") + 1).alias("Head")).to_pandas()
    first = next((m for m in ("importance", "disabling_delta", "cosine_to_pre_trained") if m in measures), measures[0])
    measure = alt.param(name="measure", value=first, bind=alt.binding_select(options=measures, name="measure "))
    task = alt.param(name="task", value=tasks[0], bind=alt.binding_select(options=tasks, name="task "))
    text_columns = [c for c in atlas.columns if c not in ("layer", "head") and c not in measures and not c.endswith(("_ci_low", "_ci_high"))]
    tooltip = [alt.Tooltip(f"{c}:N") for c in text_columns] + [alt.Tooltip(f"{m}:Q", format=".3f") for m in measures]
    chart = alt.Chart(data).transform_filter(alt.datum.task == task).transform_fold(measures, as_=["measure_name", "value"]).transform_filter(
        alt.datum.measure_name == measure
    ).transform_filter("isValid(datum.value)").mark_rect().encode(
        x=alt.X("Head:O"), y=alt.Y("Layer:O"), color=alt.Color("value:Q", scale=alt.Scale(scheme="viridis"), title="value"),
        tooltip=tooltip,
    ).properties(width=220, height=170).facet(column=alt.Column("state:N", title=None)).add_params(measure, task)
    return chart.properties(title=alt.TitleParams("Head atlas: one measure per map", subtitle=caption.split("\n"), anchor="start"))


# --- the page's layout: sections in the order of Kovaleva et al. (2019), then pruning and probing -------------

# (anchor, title, intro, items); an item is ("figure" | "table", stem under results/ with {model}, table title)
LAYOUT: tuple[tuple[str, str, str, tuple[tuple[str, str, str], ...]], ...] = (
    ("baselines", "Baselines: fine-tuned, pre-trained only and random init",
     "Dev scores per task (mean and std over seeds) of the model fine-tuned from the pre-trained encoder, of the pre-trained "
     "encoder with an untrained classifier head (the paper's \"pre-trained\" column) and of the same architecture fine-tuned "
     "from random weights (Kovaleva et al. 2019, table 1).",
     (("table", "tables/{model}/baselines", "Baselines"),)),
    ("claims", "Claims: the papers against this run",
     "Each claim of the seed papers that this run tests: the paper's number, this run's with its bootstrap interval, and "
     "a verdict by the rule written under the table's title. Scale: shares and score changes in percent or points, "
     "kappa and relative depth as they are.",
     (("table", "claims/{model}/claims", "Claims"),)),
    ("patterns", "Self-attention patterns",
     "Share of attention maps of each pattern class (vertical, diagonal, vertical+diagonal, block, heterogeneous) "
     "per task and model state, and each head's dominant class (Kovaleva et al. 2019, section 4.1). The table scores "
     "the labellers against hand labels: first on the test labels (maps labelled after the labellers' design was "
     "frozen, never trained or fitted on; interval: bootstrap over the test maps) when the label set has them, then "
     "the CNN cross-validated and the rule labeller on labels held out from fitting its thresholds; beside them the "
     "blind second pass's and a second labeller's Cohen's kappa (how far labels can be trusted at all). 'hand labels "
     "(random sample)' in the figure are the shares people gave a simple random sample of maps.",
     (("table", "patterns/{model}/summary/classifier", "Pattern labellers against hand labels"),
      ("figure", "patterns/{model}/summary/shares", ""), ("figure", "patterns/{model}/summary/heads", ""))),
    ("change", "Change of attention after fine-tuning",
     "Cosine similarity between each head's flattened attention maps before and after fine-tuning: low values mark the "
     "heads fine-tuning changed most (section 4.3, fig. 5). We compare only the real tokens' L x L maps, while the "
     "authors' code compared inputs padded to a fixed length, padded query rows and positions included, so the values "
     "differ from theirs and the comparison with the paper's figure is qualitative.",
     (("figure", "attention_change/{model}/summary/cosine", ""),)),
    ("linguistic", "Attention to linguistic features",
     "How much attention each head puts on [CLS], [SEP], nouns, pronouns, negation, subjects and objects, and token-to-token "
     "attention in both directions of each relation: verb->subject and subject->verb (a verb and its nsubj, as the paper's "
     "code), noun->pronoun and pronoun->noun (every noun with every pronoun: no coreference resolution, so an upper bound on "
     "attention to the antecedent); from->to = the from word attends to the to word (sections 4.4-4.5, fig. 6).",
     (("figure", "linguistic/{model}/summary/features", ""), ("figure", "linguistic/{model}/summary/relations", ""))),
    ("cls", "Attention to [CLS], [SEP] and token types",
     "Where the [CLS] token's attention goes (special tokens, parts of speech), before and after fine-tuning (section 4.5, fig. 7).",
     (("figure", "linguistic/{model}/summary/cls", ""),)),
    ("disabling", "Disabling heads and layers",
     "Change of the dev score when one head or one whole layer is disabled, with bootstrap intervals over examples and "
     "seeds, and the greedy search for the best set of heads to disable (section 4.6, figs. 8-9).",
     (("figure", "disabling/{model}/summary/heads", ""), ("figure", "disabling/{model}/summary/layers", ""),
      ("table", "disabling/{model}/summary/extremes", "Heads and layers whose disabling helps or hurts most"),
      ("table", "disabling/{model}/summary/greedy", "Greedy disabling"))),
    ("pruning", "Head importance and pruning",
     "Michel et al.'s (2019) gradient importance of heads and MLPs (on train examples by default) and their iterative pruning "
     "curves (on dev); Prasanna et al.'s (2020) magnitude (m) and structured (s) lottery tickets: their curves, the "
     "good/random/bad subnetworks re-fine-tuned, each ticket chosen on one half of dev and reported on the other, beside the "
     "paper's choice and report on the same dev; survival of each head across seeds and the Fleiss' kappa of the masks; "
     "the pruned models compacted.",
     (("figure", "pruning/{model}/summary/importance", ""), ("figure", "pruning/{model}/summary/michel", ""),
      ("figure", "pruning/{model}/summary/lottery_curves", ""), ("figure", "pruning/{model}/summary/survival", ""),
      ("table", "pruning/{model}/summary/lottery", "Lottery tickets: full, good, random and bad subnetworks"),
      ("table", "pruning/{model}/summary/lottery_seeds", "Lottery tickets per seed, under each protocol"),
      ("table", "pruning/{model}/summary/stability", "Stability of the masks across seeds (Fleiss' kappa)"),
      ("table", "pruning/{model}/summary/compact", "Compacted models"))),
    ("probing", "Probing and syntactic heads",
     "Linear probes per layer for parts of speech and dependency relations with Hewitt and Liang's control tasks "
     "(Tenney et al. 2019), and Clark et al.'s (2019) heads that track single dependency relations.",
     (("figure", "probing/{model}/summary/probes", ""),
      ("table", "probing/{model}/summary/probes", "Probes per layer: accuracy, control accuracy, selectivity, stopping epoch, converged reference"),
      ("table", "probing/{model}/summary/syntactic_heads", "Syntactic heads (Clark et al. 2019, table 1)"),
      ("table", "probing/{model}/summary/syntactic_heads_held_out", "Syntactic heads chosen on half the sentences, scored on the other half"))),
    ("atlas", "Head atlas",
     "Every per-head result in one row per task, model state, layer and head: dominant pattern, change after fine-tuning, "
     "attention to special tokens and features, disabling effect with interval, importance, survival in pruning and the "
     "dependency relation the head tracks best. Sort and filter the table; pick a measure and a task in the chart.",
     (("figure", "report/{model}/head_atlas", ""), ("table", "report/{model}/head_atlas", "Head atlas"))),
)


# what a reader needs to read a table right, under its title (figures carry their own captions)
TABLE_NOTES: dict[str, str] = {
    "probing/{model}/summary/probes": (
        "Each probe stops on a held-out share of the training sentences (never dev): epoch = the epoch whose weights it "
        "kept, epochs_run = when it stopped (no layer improved for probing.probe.patience epochs). reference_* = "
        "scikit-learn's LogisticRegression run to convergence on the same features (probing.reference.states): the "
        "difference is how much the probe's stopping and regularisation move accuracy and selectivity."
    ),
    "probing/{model}/summary/syntactic_heads": (
        "As Clark et al. did, each relation's best head and best offset are chosen on the sentences they are scored on, "
        "which flatters the head (144 candidates per direction against 6 offsets); the next table does not."
    ),
    "probing/{model}/summary/syntactic_heads_held_out": (
        "Head and offset chosen on a seeded half of the sentences, accuracies on the other half; difference = head minus "
        "offset, with a bootstrap interval over the report half's sentences (probing.syntactic_heads.resamples, level)."
    ),
    "disabling/{model}/summary/greedy": (
        "Heads are added one at a time while disabling them raises the score on the selection half of dev; each set is "
        "reported on the other half. A lone 'intact' row means no single head raised the selection half's score."
    ),
    "pruning/{model}/summary/lottery": (
        "The good, random and bad rows are there when pruning.subnetworks lists them (on the CPU profile: add "
        "configs/cpu_subnetworks.yaml); 'full' is the fine-tuned model. A seed whose pruning removed nothing has no ticket and "
        "is left out of its method's rows (the seeds column counts the rest; lottery.md names them). protocol: 'selected on "
        "half A, reported on half B' chooses each ticket (where the 90% rule stops) on a seeded half of dev and scores every "
        "row on the other half; 'paper: selected and reported on all of dev' is Prasanna et al.'s protocol "
        "(pruning.paper_protocol). half_a/half_b/dev: each network on each set. minus_held_out: the reported score minus the "
        "held-out protocol's (report set, ticket and re-fine-tuning run all differ); half_b_minus_held_out: both on half B, "
        "which the held-out ticket never saw, so only the ticket differs (0 for the full model)."
    ),
    "pruning/{model}/summary/lottery_seeds": (
        "One row per seed, method, subnetwork and protocol: score on the protocol's report examples (examples), on half A, "
        "half B and all of dev, share of parameters kept, minus_held_out (the score minus the held-out protocol's for the same "
        "seed) and half_b_minus_held_out (both on half B)."
    ),
    "pruning/{model}/summary/stability": (
        "Masks of the held-out tickets (chosen on half A of dev); Fleiss' kappa with seeds as raters and a bootstrap "
        "interval over the masked elements."
    ),
}


def report_stems(model: str) -> list[tuple[str, str, str]]:
    """Every (section anchor, kind, stem) the page can show for ``model``: figures are ``<stem>.vl.json``,
    tables ``<stem>.parquet``, both under ``results/``. This is the one list of the stages' summaries: the
    workflow asks for those of the sections its config runs."""
    return [(anchor, kind, stem.format(model=model)) for anchor, _, _, items in LAYOUT for kind, stem, _ in items]


def item_file(kind: str, stem: str) -> str:
    """The file behind a layout item: a figure's Vega-Lite spec, a table's Parquet."""
    return f"{stem}.{'vl.json' if kind == 'figure' else 'parquet'}"


def unfit_warning(verdicts: pl.DataFrame, runs: Sequence[Sequence[object]], model: str, baselines: bool = False) -> str | None:
    """The warning of a section showing results of ``runs`` ((task, init, seed) of ``model``) when some of
    them are models fine-tuned from the pre-trained encoder that are not fit for analysis; None otherwise.
    Random-init models are baselines, expected to be unfit: they never raise the warning."""
    from bertology_core.fitness import COLUMN, UNFIT

    wanted = {(str(t), int(s)) for t, i, s in runs if i == "pretrained"}
    unfit = [
        r for r in verdicts.filter((pl.col("model") == model) & (pl.col("init") == "pretrained") & ~pl.col("fit")).iter_rows(named=True)
        if (r["task"], int(r["seed"])) in wanted
    ]
    if not unfit:
        return None
    named = "; ".join(
        f"{r['task']} seed {r['seed']} ({r['metric']} {r['score']:.3f} vs trivial {r['trivial_score']:.3f}, difference "
        f"{r['delta']:+.3f}, interval [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], not above the margin {r['margin']:+.3f})"
        for r in unfit
    )
    what = ("these fine-tuned models are not fit for analysis" if baselines else
            f"this section shows results of {len(unfit)} fine-tuned model{'s' if len(unfit) > 1 else ''} ({model}) that "
            "did not learn the task well enough to analyse")
    return (f"{what}: {named}. Their rows say {UNFIT} in the {COLUMN} column; what such a model's heads do "
            "says little about what fine-tuning taught it, so compare them with the papers with caution (analysis.unfit: "
            "skip leaves them out).")


def build_sections(results: str | os.PathLike[str], models: Sequence[str], available: set[str],
                   verdicts: pl.DataFrame | None = None,
                   section_runs: dict[str, dict[str, Sequence[Sequence[object]]]] | None = None,
                   notes: dict[str, str] | None = None, skipped: dict[str, Sequence[str]] | None = None) -> list[Section]:
    """The page's sections for ``models``; ``available``: the files (paths as given to the job) this config
    produced. Items it did not produce are listed as such, so a reader knows a stage was left out.
    ``verdicts`` (the fitness table) and ``section_runs`` (model -> section anchor -> the (task, init, seed)
    whose results it shows) put a warning on each section that shows an unfit model's results. ``notes``: more
    table notes by layout stem (with ``{model}``), e.g. the claims table's verdict rule. ``skipped``: model ->
    the sections left empty because analysis.unfit: skip left out every model their stage would analyse."""
    results = Path(results)
    sections = []
    for anchor, title, intro, items in LAYOUT:
        section = Section(anchor, title, intro)
        for model in models:
            runs = (section_runs or {}).get(model, {}).get(anchor, [])
            warning = unfit_warning(verdicts, runs, model, baselines=anchor == "baselines") if verdicts is not None else None
            if warning:
                section.warnings.append(warning)
            for kind, template, table_title in items:
                stem = template.format(model=model)
                path = results / item_file(kind, stem)
                if str(path) not in available:
                    why = (" (analysis.unfit: skip: unfit models are left out, and this stage had no fit model to analyse)"
                           if anchor in (skipped or {}).get(model, ()) else " in this config")
                    section.missing.append(f"{stem}: not computed for {model}{why}.")
                    continue
                if kind == "figure":
                    section.items.append(load_figure(path))
                else:
                    shown = f"{table_title} ({model})" if len(models) > 1 else table_title
                    frame = pl.read_parquet(path)
                    note = " ".join(filter(None, (_table_note(path), TABLE_NOTES.get(template, ""), (notes or {}).get(template, ""))))
                    section.items.append(Table(shown, note, frame, source=str(path.with_suffix(".csv"))))
        sections.append(section)
    return sections


def _table_note(path: Path) -> str:
    return f"From {path.with_suffix('')}.{{parquet,csv,md}}."
