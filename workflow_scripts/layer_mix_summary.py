"""Tenney et al.'s centers of gravity and expected layers of every probed state, and the figure (rule
layer_mix_summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.fitness import fitness
from bertology_core.layer_mix import layer_mix_stats
from bertology_core.summaries import figures

params, inputs = snakemake.params, snakemake.input
model = snakemake.wildcards.model
verdicts = fitness.Verdicts(pl.read_parquet(inputs.fitness), model)
summary = pl.concat([pl.read_parquet(p) for p in inputs.summaries]).select("state", pl.exclude("state")).sort("labels", "state")
cumulative = pl.concat([pl.read_parquet(p) for p in inputs.cumulative]).select("state", pl.exclude("state")).sort("labels", "state", "layer")
stems = {name: snakemake.output[name][0].removesuffix(".parquet") for name in ("expected", "cumulative")}
figures.write_table(verdicts.annotate(summary, state="state"), stems["expected"], note=(
    f"Tenney et al. 2019's measures per probed state and label set: center_of_gravity = sum_l l s_l of the full scalar "
    f"mix's weights; expected_layer = sum_l l Delta_l / sum_l Delta_l of the cumulative probes' differential dev accuracy "
    f"(layer 0 = embeddings; layers = the encoder's depth; undefined where the total gain is not positive or the ratio "
    f"leaves [1, layers]). Both are means over the probes' training seeds (probe_seeds of them; *_min and *_max: the "
    f"seeds' range); the {params.level:.0%} interval resamples dev sentences and draws one probe seed per resample, so it "
    "covers probe training too. The *_share columns divide by the depth, to compare with a model of another depth."))
figures.write_table(verdicts.annotate(cumulative, state="state"), stems["cumulative"])
sample = f"{params.sample['train_sentences'] or 'all'} train / {params.sample['dev_sentences'] or 'all'} dev sentences"
means = layer_mix_stats.mean_expected_layers(summary)
figures.save_chart(figures.with_caption(
    layer_mix_stats.mix_chart(cumulative, summary),
    "Where each label set's information sits across depth (Tenney et al. 2019, fig. 1)",
    f"Left: what each layer adds to a probe on the mix of layers 0..l (dev accuracy). Right: the weight of each layer in a "
    f"scalar-mix probe over all layers.\nModel {model}; UD EWT {sample}, {params.sample['pooling']} word piece; mean expected layer "
    f"over the states that have one: {means}.",
), stems["expected"])
