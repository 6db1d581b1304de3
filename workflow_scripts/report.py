"""The report page (rule report): every stage's tables and figures and the head atlas, on one page."""

from _common import log_to

log_to(snakemake.log[0])

import logging
import time
from pathlib import Path

import polars as pl

from bertology_core.data import states
from bertology_core.report import report

started = time.perf_counter()
models = snakemake.params.models
verdicts = pl.read_parquet(snakemake.input.fitness)
results = str(Path(snakemake.output[0]).parents[1])  # the page is results/report/index.html
layout = report.load_layout(snakemake.input.layout, snakemake.input.texts, snakemake.params.titles, snakemake.params.tables)
sections = report.build_sections(results, models, set(snakemake.input.shown), snakemake.params.sections, layout, verdicts,
                                 snakemake.params.section_runs, snakemake.params.skipped, snakemake.params.left_out)
params = snakemake.params
subtitle = [
    "Models: " + ", ".join(f"{name} ({spec})" for name, spec in params.model_specs.items()) + f". Tasks: {', '.join(params.tasks)}. "
    f"Seeds: {', '.join(map(str, params.seeds))} (stages may add seeds; see each caption).",
    "Every figure and table below is also a file under results/ (named under each one); layers and heads are 0-based "
    "in tables, 1-based (L<layer>H<head>) in names and figures, as the papers print them.",
]
given = verdicts.filter(pl.col("given").is_not_null())
if given.height:  # fine-tuned elsewhere, with a recipe this run did not choose
    subtitle.append(
        "Fine-tuned models given in the config (models[].finetuned), not fine-tuned here: "
        + ", ".join(f"{r['model']} {r['task']} seed {r['seed']} ({r['given']})" for r in given.iter_rows(named=True))
        + "; every comparison with a model this run trained (the from-scratch baseline, re-fine-tuned lottery "
        "subnetworks) sets two recipes side by side."
    )
unfit = verdicts.filter(~pl.col("fit") & (pl.col("state") == states.FINETUNED))
if unfit.height and snakemake.params.unfit == "skip":
    subtitle.append(
        "fitness.if_unfit: skip left these fine-tuned models out of every analysis, as they are not fit for it (see the "
        "baselines): " + ", ".join(f"{r['model']} {r['task']} seed {r['seed']}" for r in unfit.iter_rows(named=True)) + "."
    )
size = report.write_page(snakemake.output[0], "bertology report", subtitle, sections)
shown = sum(len(s.items) for s in sections)
logging.info("wrote %s: %d figures and tables, %.1f MB, in %.1f s", snakemake.output[0], shown, size / 1e6,
             time.perf_counter() - started)
