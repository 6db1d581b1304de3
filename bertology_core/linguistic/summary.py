"""The linguistic stage's summaries of one model (rule linguistic_summary), as :class:`~bertology_core.summaries.figures.Output`:
attention to linguistic features, token-to-token attention along relations and where [CLS] attends. Never imports torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import altair as alt
import polars as pl

from bertology_core.data import states
from bertology_core.fitness.verdict_stats import Verdicts
from bertology_core.linguistic import score_tables
from bertology_core.summaries import figures
from bertology_core.summaries.figures import Output

PRE_TRAINED, FINE_TUNED = states.label(states.PRETRAINED), states.label(states.FINETUNED)
CLS_TYPES = ["[CLS]", "[SEP]", "punctuation", "pronoun", "noun", "verb", "other"]


@dataclass(frozen=True)
class LinguisticSettings:
    """What every caption says the scores rest on: the model, the dev examples per task (config
    ``attention.max_examples``) and the tasks left out, each with why."""

    model: str
    examples: int | None
    left_out: Sequence[str]

    @property
    def note(self) -> str:
        note = f"Model {self.model}; up to {self.examples} dev examples per task; fine-tuned = mean over seeds."
        if self.left_out:
            note += " Left out: " + "; ".join(self.left_out) + "."
        return note


def tagged(per_dump: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """One kind of score of every dump (``per_dump``: ``TASK/dumped state`` -> its table), with its ``task``,
    ``state`` (the dumped state) and ``model_state`` (its label)."""
    frames = []
    for key, frame in per_dump.items():
        task, dumped = key.split("/", 1)
        frames.append(frame.with_columns(
            pl.lit(task).alias("task"), pl.lit(dumped).alias("state"),
            pl.lit(states.label(states.dumped_state(dumped))).alias("model_state")))
    return pl.concat(frames, how="diagonal")


def summarise(features: Mapping[str, pl.DataFrame], relations: Mapping[str, pl.DataFrame],
              cls_shares: Mapping[str, pl.DataFrame], verdicts: Verdicts, settings: LinguisticSettings) -> dict[str, Output]:
    """``features``, ``relations``, ``cls_shares``: each dump's tables (``TASK/dumped state`` -> table). Returns
    Kovaleva et al. 2019's section 4.4 (fig. 6 for [CLS] and [SEP]) as ``features``, section 4.5 as ``relations``
    and fig. 7 as ``cls``."""
    note = settings.note
    feature_means = score_tables.state_means(tagged(features), ["layer", "head", "feature"])
    panels = [
        figures.head_grid(feature_means.filter(pl.col("model_state") == view), "score", "feature", "task", view,
                          scheme="redblue" if view == states.DIFFERENCE else "viridis",
                          domain_mid=0.0 if view == states.DIFFERENCE else None)
        for view in (PRE_TRAINED, FINE_TUNED, states.DIFFERENCE)
        if view in set(feature_means["model_state"])
    ]
    features_chart = figures.with_caption(
        alt.hconcat(*panels).resolve_scale(color="independent"),
        "Attention to linguistic features per head (Kovaleva et al. 2019, section 4.4; fig. 6 for [CLS] and [SEP])",
        "Score: attention a token receives from all tokens / sequence length, max over tokens of the type, mean over examples with it.\n"
        + note)

    # direction "from->to": the from word attends to the to word; both directions of a relation share its word pairs
    relation_means = score_tables.state_means(tagged(relations), ["layer", "head", "relation", "direction", "from", "to"])
    shown = FINE_TUNED if FINE_TUNED in set(relation_means["model_state"]) else PRE_TRAINED
    relations_chart = figures.with_caption(
        figures.head_grid(relation_means.filter(pl.col("model_state") == shown), "score", "direction", "task", shown, cell=10),
        "Token-to-token attention in both directions: " + ", ".join(sorted(set(relation_means["direction"])))
        + " (Kovaleva et al. 2019, section 4.5)",
        "Row from->to: attention of the from word to the to word (sum over the to word's pieces, mean over the from word's), "
        "max over the example's pairs, mean over examples with a pair.\n"
        "subject-verb: nsubj and its verb (the paper's code); noun-pronoun: every noun with every pronoun, standing in for the antecedent.\n"
        + note)

    cls = tagged(cls_shares).group_by("task", "model_state", "type").agg(pl.col("share").mean()).sort("task", "model_state", "type")
    cls_chart = alt.Chart(cls.to_pandas()).mark_bar().encode(
        y=alt.Y("task:N", title=None), x=alt.X("share:Q", stack="normalize", axis=alt.Axis(format="%"), title="share of [CLS]'s attention"),
        color=alt.Color("type:N", sort=CLS_TYPES),
        row=alt.Row("model_state:N", title=None),
        tooltip=["task", "model_state", "type", alt.Tooltip("share:Q", format=".1%")],
    ).properties(width=420)
    return {
        "features": Output(verdicts.annotate(feature_means.sort("task", "model_state", "feature", "layer", "head"),
                                             state="model_state"), figure=features_chart),
        "relations": Output(verdicts.annotate(relation_means.sort("task", "model_state", "relation", "direction", "layer", "head"),
                                              state="model_state"), figure=relations_chart),
        "cls": Output(verdicts.annotate(cls, state="model_state"), figure=figures.with_caption(
            cls_chart, "Where [CLS] attends in the last layer (Kovaleva et al. 2019, fig. 7)",
            "Share of the [CLS] row of the last layer on each token type, mean over heads and examples.\n" + note)),
    }
