"""The layer_mix stage's summaries of one model (rule layer_mix_summary), as :class:`~bertology_core.summaries.figures.Output`:
Tenney et al. 2019's centers of gravity and expected layers of every probed state, and its fig. 1. Never imports torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from bertology_core.fitness.verdict_stats import Verdicts
from bertology_core.layer_mix import stats
from bertology_core.summaries import figures
from bertology_core.summaries.figures import Output


@dataclass(frozen=True)
class LayerMixSettings:
    """What the note and caption say was run: the interval's level (config ``layer_mix``) and the probes' sample
    (config ``probing``: ``pooling``, ``train_sentences``, ``dev_sentences``; a sentence count of None or 0: all)."""

    model: str
    level: float
    sample: Mapping[str, Any]


def summarise(summaries: Sequence[pl.DataFrame], cumulative: Sequence[pl.DataFrame], verdicts: Verdicts,
              settings: LayerMixSettings) -> dict[str, Output]:
    """``summaries`` and ``cumulative``: every probed state's (rule layer_mix). Returns ``expected_layers`` (the
    measures per state and label set, and Tenney et al. 2019's fig. 1) and ``cumulative`` (the cumulative probes)."""
    summary = pl.concat(summaries).select("state", pl.exclude("state")).sort("labels", "state")
    cumulative = pl.concat(cumulative).select("state", pl.exclude("state")).sort("labels", "state", "layer")
    sample = f"{settings.sample['train_sentences'] or 'all'} train / {settings.sample['dev_sentences'] or 'all'} dev sentences"
    means = stats.mean_expected_layers(summary)
    chart = figures.with_caption(
        stats.mix_chart(cumulative, summary),
        "Where each label set's information sits across depth (Tenney et al. 2019, fig. 1)",
        f"Left: what each layer adds to a probe on the mix of layers 0..l (dev accuracy). Right: the weight of each layer in a "
        f"scalar-mix probe over all layers.\nModel {settings.model}; UD EWT {sample}, {settings.sample['pooling']} word piece; "
        f"mean expected layer over the states that have one: {means}.",
    )
    return {
        "expected_layers": Output(verdicts.annotate(summary, state="state"), note=(
            f"Tenney et al. 2019's measures per probed state and label set: center_of_gravity = sum_l l s_l of the full scalar "
            f"mix's weights; expected_layer = sum_l l Delta_l / sum_l Delta_l of the cumulative probes' differential dev accuracy "
            f"(layer 0 = embeddings; layers = the encoder's depth; undefined where the total gain is not positive or the ratio "
            f"leaves [1, layers]). Both are means over the probes' training seeds (probe_seeds of them; *_min and *_max: the "
            f"seeds' range); the {settings.level:.0%} interval resamples dev sentences and draws one probe seed per resample, so it "
            "covers probe training too. The *_share columns divide by the depth, to compare with a model of another depth."),
            figure=chart),
        "cumulative": Output(verdicts.annotate(cumulative, state="state")),
    }
