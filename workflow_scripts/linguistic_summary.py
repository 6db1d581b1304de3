"""Attention to linguistic features (section 4.4; fig. 6 for [CLS] and [SEP]), [CLS] in the last layer (fig. 7)
and token-to-token attention in both directions of each relation, e.g. verb->subject and subject->verb
(section 4.5): tables and figures per model (rule linguistic_summary)."""

from _common import log_to

log_to(snakemake.log[0])

import altair as alt
import polars as pl

from bertology_core.data import states
from bertology_core.fitness import fitness
from bertology_core.linguistic import linguistic
from bertology_core.summaries import figures

PRE_TRAINED, FINE_TUNED = states.label(states.PRETRAINED), states.label(states.FINETUNED)


# the fine-tuned rows of a task pool the seeds of its dumped fine-tuned models
verdicts = fitness.Verdicts(pl.read_parquet(snakemake.input.fitness), snakemake.wildcards.model,
                            fitness.seeds_by_task(snakemake.params.fine_tuned))


def load(kind):
    frames = []
    for key, path in zip(snakemake.params.dump_keys, snakemake.input[kind]):
        task, dumped = key.split("/", 1)
        frames.append(pl.read_parquet(path).with_columns(
            pl.lit(task).alias("task"), pl.lit(dumped).alias("state"),
            pl.lit(states.label(states.dumped_state(dumped))).alias("model_state")))
    return pl.concat(frames, how="diagonal")


note = f"Model {snakemake.wildcards.model}; up to {snakemake.params.examples} dev examples per task; fine-tuned = mean over seeds."
if snakemake.params.left_out:
    note += " Left out: " + "; ".join(snakemake.params.left_out) + "."
features = linguistic.state_means(load("features"), ["layer", "head", "feature"])
figures.write_table(verdicts.annotate(features.sort("task", "model_state", "feature", "layer", "head"), state="model_state"),
                    snakemake.params.out + "/features")
panels = [
    figures.head_grid(features.filter(pl.col("model_state") == view), "score", "feature", "task", view,
                      scheme="redblue" if view == states.DIFFERENCE else "viridis",
                      domain_mid=0.0 if view == states.DIFFERENCE else None)
    for view in (PRE_TRAINED, FINE_TUNED, states.DIFFERENCE)
    if view in set(features["model_state"])
]
figures.save_chart(figures.with_caption(
    alt.hconcat(*panels).resolve_scale(color="independent"),
    "Attention to linguistic features per head (Kovaleva et al. 2019, section 4.4; fig. 6 for [CLS] and [SEP])",
    "Score: attention a token receives from all tokens / sequence length, max over tokens of the type, mean over examples with it.\n"
    + note), snakemake.params.out + "/features")

# direction "from->to": the from word attends to the to word; both directions of a relation share its word pairs
relations = linguistic.state_means(load("relations"), ["layer", "head", "relation", "direction", "from", "to"])
shown = FINE_TUNED if FINE_TUNED in set(relations["model_state"]) else PRE_TRAINED
figures.write_table(
    verdicts.annotate(relations.sort("task", "model_state", "relation", "direction", "layer", "head"), state="model_state"),
    snakemake.params.out + "/relations")
figures.save_chart(figures.with_caption(
    figures.head_grid(relations.filter(pl.col("model_state") == shown), "score", "direction", "task", shown, cell=10),
    "Token-to-token attention in both directions: " + ", ".join(sorted(set(relations["direction"])))
    + " (Kovaleva et al. 2019, section 4.5)",
    "Row from->to: attention of the from word to the to word (sum over the to word's pieces, mean over the from word's), "
    "max over the example's pairs, mean over examples with a pair.\n"
    "subject-verb: nsubj and its verb (the paper's code); noun-pronoun: every noun with every pronoun, standing in for the antecedent.\n"
    + note),
    snakemake.params.out + "/relations")

cls = load("cls_shares").group_by("task", "model_state", "type").agg(pl.col("share").mean()).sort("task", "model_state", "type")
figures.write_table(verdicts.annotate(cls, state="model_state"), snakemake.params.out + "/cls")
chart = alt.Chart(cls.to_pandas()).mark_bar().encode(
    y=alt.Y("task:N", title=None), x=alt.X("share:Q", stack="normalize", axis=alt.Axis(format="%"), title="share of [CLS]'s attention"),
    color=alt.Color("type:N", sort=["[CLS]", "[SEP]", "punctuation", "pronoun", "noun", "verb", "other"]),
    row=alt.Row("model_state:N", title=None),
    tooltip=["task", "model_state", "type", alt.Tooltip("share:Q", format=".1%")],
).properties(width=420)
figures.save_chart(figures.with_caption(
    chart, "Where [CLS] attends in the last layer (Kovaleva et al. 2019, fig. 7)",
    "Share of the [CLS] row of the last layer on each token type, mean over heads and examples.\n" + note),
    snakemake.params.out + "/cls")
