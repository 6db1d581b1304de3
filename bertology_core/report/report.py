"""The report: every stage's tables and figures on one self-contained HTML page.

The page embeds each figure's Vega-Lite spec (written by :func:`figures.save_chart` as ``.vl.json``)
and one copy of the Vega, Vega-Lite and Vega-Embed libraries (from vl-convert), so it opens from the
file system with no network. Tables are plain HTML, sortable (click a column) and filterable. The page's
markup is a Jinja2 template, its style and script plain files: all in ``bertology_core/report/page/``.
The head atlas, a table and figure like any other stage's here, is :mod:`bertology_core.report.head_atlas`.
"""

from __future__ import annotations

import functools
import html
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import altair as alt
import jinja2
import polars as pl
import vl_convert
import yaml
from markupsafe import Markup

from bertology_core.data import states
from bertology_core.data.io import write_text
from bertology_core.fitness.verdict_stats import COLUMN, UNFIT
from bertology_core.summaries.files import item_file

_PAGE = Path(__file__).with_name("page")  # the page's template, style and script (package data)


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
    """(shown text, sort key) of a table cell: floats sort on their full value, not the rounded text."""
    if value is None:
        return "", ""
    if isinstance(value, float):
        return float_format.format(value), repr(value)
    if isinstance(value, bool):
        return str(value).lower(), str(int(value))
    if isinstance(value, int):
        return str(value), str(value)
    return str(value), str(value)


@dataclass(frozen=True)
class _TableView:
    """A table as the template shows it: cells already formatted, since a format spec and ``repr`` are Python's."""

    title: str
    columns: list[tuple[str, bool]]  # (name, numeric): numeric columns sort as numbers in the page
    rows: list[list[tuple[str, str]]]  # per cell: (shown text, sort key)
    shown: int  # rows on the page
    total: int  # rows in the table
    max_rows: int | None
    source: str


def _table_view(table: Table, max_rows: int | None = None) -> _TableView:
    """The table (its first ``max_rows`` rows when given) as table.html.j2 shows it."""
    frame = table.frame if max_rows is None else table.frame.head(max_rows)
    return _TableView(
        title=table.title,
        columns=[(column, dtype.is_numeric()) for column, dtype in zip(frame.columns, frame.dtypes)],
        rows=[[_cell(value, table.float_format) for value in row] for row in frame.iter_rows()],
        shown=frame.height, total=table.frame.height, max_rows=max_rows, source=table.source,
    )


def _escape(value: object) -> object:
    """Jinja's ``finalize``: every ``{{ }}`` escaped as :func:`html.escape` does (``&quot;``, ``&#x27;``), as the page
    always was, rather than by markupsafe (``&#34;``, ``&#39;``), so the page stays byte for byte the same; Markup
    (the style, script, Vega bundle and specs' JSON) passes as it is."""
    return value if hasattr(value, "__html__") else Markup(html.escape(str(value)))


def _script_json(data: object) -> Markup:
    """JSON that is safe inside a <script> element: no ``</`` can close it."""
    return Markup(json.dumps(data, separators=(",", ":")).replace("</", "<\\/"))


@functools.cache
def _asset(name: str) -> Markup:
    """The page's style or script, embedded as it is (read as text, not as a template: CSS and JS have braces)."""
    return Markup((_PAGE / name).read_text(encoding="utf-8"))


@functools.cache
def _environment() -> jinja2.Environment:
    """The page's templates (``bertology_core/report/page``, package data). Whitespace control keeps their line breaks
    out of the page; StrictUndefined turns a misspelt name into an error instead of an empty string."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_PAGE), autoescape=True, finalize=_escape, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    environment.filters["script_json"] = _script_json
    environment.tests["figure"] = lambda item: isinstance(item, Figure)
    environment.globals.update(figure_tasks=figure_tasks, table_view=_table_view)
    return environment


def table_html(table: Table, table_id: str, max_rows: int | None = None) -> str:
    """An HTML table with a filter box; every column sorts on click (numbers numerically)."""
    macro = _environment().get_template("table.html.j2").module.table_block  # type: ignore[attr-defined]
    return str(macro(_table_view(table, max_rows), table_id))


def render_page(title: str, subtitle: Sequence[str], sections: Sequence[Section], vega_bundle: str) -> str:
    """The whole page as one HTML string (``vega_bundle``: vl_convert.javascript_bundle())."""
    specs = {f"{section.anchor}-{number}": item.spec
             for section in sections for number, item in enumerate(section.items) if isinstance(item, Figure)}
    return _environment().get_template("page.html.j2").render(
        title=title, subtitle=subtitle, sections=sections, specs=specs, vega_bundle=Markup(vega_bundle),
        style=_asset("page.css"), script=_asset("page.js"),
    )


def write_page(path: str | os.PathLike[str], title: str, subtitle: Sequence[str], sections: Sequence[Section]) -> int:
    """Render and write the page atomically; returns its size in bytes."""
    page = render_page(title, subtitle, sections, vl_convert.javascript_bundle(vl_version=".".join(alt.SCHEMA_VERSION.split(".")[:2])))
    write_text(page, path)
    return len(page.encode())


# --- the page's layout: its order read from report/layout.yaml, its texts from report/sections/*.rst, titles and notes
# as the stages declare them ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """How the page presents the sections the workflow declares: their order (``order``, from report/layout.yaml) and
    titles, each section's text (``texts``: anchor -> text) and the title and note of each table (``tables``: stem
    with ``{model}`` -> (title, note)), as the stages declare them. A declared section the layout does not name comes
    after the others; one with no title is titled by its anchor, a table with none by its file name."""

    order: tuple[str, ...] = ()
    titles: Mapping[str, str] = field(default_factory=dict)
    texts: Mapping[str, str] = field(default_factory=dict)
    tables: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def title(self, anchor: str) -> str:
        return self.titles.get(anchor) or anchor.replace("_", " ").capitalize()

    def table_title(self, stem: str) -> str:
        return (self.tables.get(stem) or ("", ""))[0] or stem.rsplit("/", 1)[-1].replace("_", " ").capitalize()

    def table_note(self, stem: str) -> str:
        return (self.tables.get(stem) or ("", ""))[1]

    def ordered(self, anchors: Sequence[str]) -> list[str]:
        """``anchors`` (declared sections) in the layout's order, those it does not name after, as declared."""
        return [a for a in self.order if a in anchors] + [a for a in anchors if a not in self.order]


def read_section_text(path: str | os.PathLike[str]) -> str:
    """A section's text file (reStructuredText, also its caption in Snakemake's report) as one paragraph: its
    lines joined by single spaces."""
    return " ".join(line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip())


def load_layout(layout_file: str | os.PathLike[str], text_files: Sequence[str | os.PathLike[str]] = (),
                titles: Mapping[str, str] | None = None, tables: Mapping[str, Sequence[str]] | None = None) -> Layout:
    """The order of ``layout_file`` (YAML: ``sections``, a list of anchors) with the section texts of ``text_files``
    (``<anchor>.rst``) and the stages' ``titles`` (anchor -> title) and ``tables`` (stem -> (title, note))."""
    data = yaml.safe_load(Path(layout_file).read_text(encoding="utf-8")) or {}
    sections = data.get("sections") or []
    bad = [entry for entry in sections if not isinstance(entry, str)]
    if bad or set(data) - {"sections"}:
        found = repr(bad[0]) if bad else f"the field(s) {sorted(set(data) - {'sections'})}"
        raise ValueError(f"{layout_file}: {found}. Fix: the layout only orders the sections: 'sections', a list of "
                         "anchors (titles and table notes are declared by each stage, bertology_core/<stage>/stage.py).")
    return Layout(
        order=tuple(sections),
        titles=dict(titles or {}),
        texts={Path(path).stem: read_section_text(path) for path in text_files},
        tables={stem: tuple(texts) for stem, texts in (tables or {}).items()},
    )


def unfit_warning(verdicts: pl.DataFrame, runs: Sequence[Sequence[object]], model: str, baselines: bool = False) -> str | None:
    """The warning of a section showing results of ``runs`` ((task, state, seed) of ``model``) when some of
    them are models fine-tuned from the pre-trained encoder (state finetuned) that are not fit for analysis; None
    otherwise. Models fine-tuned from scratch are baselines, expected to be unfit: they never raise the warning."""
    wanted = {(str(t), int(s)) for t, state, s in runs if state == states.FINETUNED}
    unfit = [
        r for r in verdicts.filter((pl.col("model") == model) & (pl.col("state") == states.FINETUNED) & ~pl.col("fit")).iter_rows(named=True)
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
            "says little about what fine-tuning taught it, so compare them with the papers with caution (fitness.if_unfit: "
            "skip leaves them out).")


def build_sections(results: str | os.PathLike[str], models: Sequence[str], available: set[str],
                   declared: dict[str, Sequence[Sequence[str]]], layout: Layout,
                   verdicts: pl.DataFrame | None = None,
                   section_runs: dict[str, dict[str, Sequence[Sequence[object]]]] | None = None,
                   skipped: dict[str, Sequence[str]] | None = None, left_out: Sequence[str] = ()) -> list[Section]:
    """The page's sections for ``models``. ``declared``: section anchor -> the (kind, stem with ``{model}``) it shows,
    as the stages declare them (a figure's ``.vl.json``, a table's ``.parquet``, under ``results``); ``layout``: how
    they are ordered and titled; ``available``: the files (paths as given to the job) this config produced. Items it
    did not produce are listed as such, so a reader knows a stage was left out. ``verdicts`` (the fitness table) and
    ``section_runs`` (model -> section anchor -> the (task, state, seed) whose results it shows) put a warning on each
    section that shows an unfit model's results. A table's note: where its files are, the note its stage kept in the
    Parquet file (:func:`table_note`, e.g. the claims table's verdict rule) and the layout's. ``skipped``: model -> the
    sections left empty because fitness.if_unfit: skip left out every model their stage would analyse; ``left_out``: the
    sections of the stages the config's ``stages`` leave out."""
    results = Path(results)
    sections = []
    for anchor in layout.ordered(list(declared)):
        section = Section(anchor, layout.title(anchor), layout.texts.get(anchor, ""))
        if anchor in left_out:  # one line, not one per file it would have shown
            section.missing.append(f"{anchor}: not run; the config's stages leave it out (add {anchor} to stages).")
            sections.append(section)
            continue
        for model in models:
            runs = (section_runs or {}).get(model, {}).get(anchor, [])
            warning = unfit_warning(verdicts, runs, model, baselines=anchor == "baselines") if verdicts is not None else None
            if warning:
                section.warnings.append(warning)
            for kind, template in declared[anchor]:
                stem = template.format(model=model)
                path = results / item_file(kind, stem)
                if str(path) not in available:
                    why = (" (fitness.if_unfit: skip: unfit models are left out, and this stage had no fit model to analyse)"
                           if anchor in (skipped or {}).get(model, ()) else " in this config")
                    section.missing.append(f"{stem}: not computed for {model}{why}.")
                    continue
                if kind == "figure":
                    section.items.append(load_figure(path))
                else:
                    title = layout.table_title(template)
                    shown = f"{title} ({model})" if len(models) > 1 else title
                    frame = pl.read_parquet(path)
                    note = " ".join(filter(None, (_table_files(path), table_note(path), layout.table_note(template))))
                    section.items.append(Table(shown, note, frame, source=str(path.with_suffix(".csv"))))
        sections.append(section)
    return sections


def _table_files(path: Path) -> str:
    return f"From {path.with_suffix('')}.{{parquet,csv}}."


def table_note(path: str | os.PathLike[str]) -> str:
    """The note a stage kept in a table's Parquet file (bertology_core.summaries.figures.write_table), '' if none."""
    return pl.read_parquet_metadata(path).get("note", "")
