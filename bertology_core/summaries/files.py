"""The files of one summary, written once and read by both reports: a tidy table's (:func:`figures.write_table`)
and a figure's (:func:`figures.save_chart`). The report page shows a table's Parquet and embeds a figure's Vega-Lite
spec; Snakemake's report (``snakemake --report``) holds a table's CSV and a figure's PNG. Plain names: the stages' declarations
(:mod:`bertology_core.workflow.jobs`) reads them while Snakemake parses the workflow."""

TABLE_FILES = (".parquet", ".csv")
FIGURE_FILES = (".png", ".vl.json")


def item_file(kind: str, stem: str) -> str:
    """The file behind an item the report page shows (``kind`` table or figure): a table's Parquet, a figure's
    Vega-Lite spec."""
    return f"{stem}.{'vl.json' if kind == 'figure' else 'parquet'}"
