"""Class shares per task and state (fig. 2), per-head dominant class, and their figures (rule pattern_summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import io
from bertology_core.fitness import fitness
from bertology_core.patterns import pattern_tables
from bertology_core.summaries import figures

frames = {key: pl.read_parquet(path) for key, path in zip(snakemake.params.dump_keys, snakemake.input.classes)}
report = io.read_json(snakemake.input.report)
source = report["labels_source"]
verdicts = fitness.Verdicts(pl.read_parquet(snakemake.input.fitness), snakemake.wildcards.model)
shares = pl.concat([
    pattern_tables.class_shares(frames, "rule_label").with_columns(pl.lit("rule-based").alias("labeller")),
    pattern_tables.class_shares(frames, "cnn_label").with_columns(pl.lit("CNN").alias("labeller")),
    pattern_tables.hand_label_shares(report).with_columns(pl.lit("hand labels (random sample)").alias("labeller")),
    pattern_tables.hand_label_shares(report, test=True).with_columns(pl.lit("test labels (random sample)").alias("labeller")),
], how="diagonal_relaxed").with_columns(pl.lit(source).alias("cnn_labels_source"))
shares = verdicts.annotate(shares, state="dump")
figures.write_table(shares, snakemake.params.out + "/shares")
figures.write_table(pattern_tables.classifier_table(report), snakemake.params.out + "/classifier")
figures.write_table(pattern_tables.confusion_table(report), snakemake.params.out + "/confusion")
heads = pl.concat([
    pattern_tables.dominant_class(frame, "cnn_label").with_columns(pl.lit(key).alias("dump"))
    for key, frame in frames.items()
]).with_columns(pl.lit(source).alias("cnn_labels_source"))
heads = verdicts.annotate(heads, state="dump")
figures.write_table(heads, snakemake.params.out + "/heads")
config_note = f"model {snakemake.wildcards.model}; up to {snakemake.params.examples} dev examples per task; CNN: {source}"
unlearnt = pattern_tables.classes_not_learnt(report)
if unlearnt:  # a 0% the CNN cannot avoid is not a measurement
    config_note += f"\nThe CNN learnt no {', '.join(unlearnt)} (no training labels of it): its 0% there is not measured."
figures.save_chart(
    figures.class_share_bars(
        shares, "Self-attention pattern classes per task (Kovaleva et al. 2019, fig. 2)",
        f"Share of all (example, layer, head) maps in each class; paper: heterogeneous 32-61% on BERT-base. 'hand labels' and "
        f"'test labels': people's classes of maps drawn at random from each dump (the training labels' and the test labels')."
        f"\n{config_note}",
    ),
    snakemake.params.out + "/shares",
)
figures.save_chart(
    figures.class_heatmap(
        heads, "Dominant pattern class per head (CNN)",
        f"Most frequent CNN class of each head over examples; faint = a weak majority.\n{config_note}",
    ),
    snakemake.params.out + "/heads",
)
