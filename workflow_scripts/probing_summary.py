"""Probe accuracy and selectivity against depth for every model state, and Clark et al.'s syntactic-head
table (rule probing_summary)."""

from _common import log_to

log_to(snakemake.log[0])

import altair as alt
import polars as pl

from bertology_core.fitness import fitness
from bertology_core.summaries import figures

params = snakemake.params
model = snakemake.wildcards.model
out = snakemake.output.probes[0].rsplit("/", 1)[0]
settings = params.sample
verdicts = fitness.Verdicts(pl.read_parquet(snakemake.input.fitness), model)

probes = pl.concat([pl.read_parquet(p) for p in snakemake.input.probes]).select(
    "state", "labels", "layer", "accuracy", "control_accuracy", "selectivity", "epoch", "control_epoch", "epochs_run",
    "control_epochs_run", "reference_accuracy", "reference_control_accuracy", "reference_selectivity",
    "reference_probe_accuracy", "reference_probe_control_accuracy", "reference_train_words", "majority_accuracy",
    "classes", "train_words", "dev_words",
).sort("labels", "state", "layer")
figures.write_table(verdicts.annotate(probes, state="state"), f"{out}/probes")
long = probes.unpivot(index=["state", "labels", "layer"], on=["accuracy", "selectivity", "control_accuracy"],
                      variable_name="measure", value_name="value")
chart = alt.Chart(long.to_pandas()).mark_line(point=True).encode(
    x=alt.X("layer:O", title="layer (0 = embeddings)"),
    y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=False)),
    color=alt.Color("state:N"),
    tooltip=["state", "labels", "measure", "layer", alt.Tooltip("value:Q", format=".3f")],
).properties(width=220, height=160).facet(row=alt.Row("measure:N", title=None), column=alt.Column("labels:N", title=None)).resolve_scale(y="independent")
sample = f"{settings['train_sentences'] or 'all'} train / {settings['dev_sentences'] or 'all'} dev sentences"
figures.save_chart(figures.with_caption(
    chart, "Layer-wise linear probes and control tasks (Tenney et al. 2019; Hewitt & Liang 2019)",
    f"Dev accuracy of one linear probe per layer ({settings['pooling']} word piece), the control task's accuracy (random labels fixed "
    f"per word type) and selectivity (their difference).\nModel {model}; treebank {sample}; states: {', '.join(params.states)}.",
), f"{out}/probes")

heads = pl.concat([pl.read_parquet(p) for p in snakemake.input.heads]) if snakemake.input.heads else pl.DataFrame()
if heads.height:
    heads = heads.select("state", "relation", "words", "clark_name", "layer", "head", "direction", "accuracy",
                         "baseline_accuracy", "baseline_offset").sort("state", pl.col("relation") != "all", -pl.col("words"))
figures.write_table(verdicts.annotate(heads, state="state") if heads.height else heads, f"{out}/syntactic_heads", note=(
    "Best head per dependency relation (Clark et al. 2019, table 1): accuracy of the head's most-attended word "
    "being the word's syntactic head, best over both directions; baseline: the best fixed offset. Layers and heads "
    "0-based; clark_name counts from 1 as the paper does."))
held_out = pl.concat([pl.read_parquet(p) for p in snakemake.input.held_out]) if snakemake.input.held_out else pl.DataFrame()
if held_out.height:
    held_out = verdicts.annotate(held_out.select("state", pl.exclude("state")), state="state")
figures.write_table(held_out, f"{out}/syntactic_heads_held_out")
