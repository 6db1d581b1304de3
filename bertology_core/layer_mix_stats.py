"""Tenney et al. 2019's measures from cumulative probe scores: the center of gravity, the expected layer and their
resampled intervals (:mod:`bertology_core.layer_mix` trains the probes; this module needs no torch)."""

from __future__ import annotations

import numpy as np
import polars as pl

from bertology_core.bootstrap import percentile_interval, resample_indices


def center_of_gravity(mix: np.ndarray) -> float:
    """``E_s[l] = sum_l l * s_l`` of one probe's mixing weights ``[layers]`` (layer 0: the embeddings)."""
    mix = np.asarray(mix, dtype=float)
    return float((np.arange(len(mix)) * mix).sum() / mix.sum())


def expected_layer(scores: np.ndarray) -> np.ndarray:
    """``E_Delta[l]`` from the cumulative scores ``[..., layers]`` (``Score(P_0) .. Score(P_L)``); NaN where the
    differential scores do not sum to a positive number."""
    scores = np.asarray(scores, dtype=float)
    deltas = np.diff(scores, axis=-1)
    layers = np.arange(1, scores.shape[-1])
    total = deltas.sum(axis=-1)
    weighted = (deltas * layers).sum(axis=-1)
    return np.divide(weighted, total, out=np.full(np.shape(total), np.nan), where=total > 0)


def resampled_expected_layers(correct: dict[str, np.ndarray], sentences: dict[str, np.ndarray], resamples: int,
                               seed: int) -> dict[str, np.ndarray]:
    """Each label set's expected layer ``[resamples]`` on dev resampled by sentence (the words of one sentence are not
    independent): every draw takes as many sentences as the label sets cover together, with replacement, the same
    sentences for every label set (so differences between them are paired), and scores all their words.
    ``correct[name]`` is ``[probes, words]``, ``sentences[name]`` the sentence of each word."""
    universe = np.unique(np.concatenate([np.asarray(s) for s in sentences.values()]))
    draws = resample_indices(len(universe), resamples, seed)  # [resamples, sentences]
    out = {}
    for name, right_words in correct.items():
        position = np.searchsorted(universe, sentences[name])
        right = np.zeros((right_words.shape[0], len(universe)))
        np.add.at(right.T, position, right_words.T.astype(float))
        counts = np.bincount(position, minlength=len(universe)).astype(float)
        totals = counts[draws].sum(axis=-1)  # [resamples]
        scores = np.divide(right[:, draws].sum(axis=-1), totals, out=np.full((right.shape[0], resamples), np.nan),
                           where=totals > 0).T
        out[name] = expected_layer(scores)
    return out


def interval(draws: np.ndarray, level: float, min_share: float = 0.99) -> tuple[float, float]:
    """Percentile interval of ``draws``; NaN when more than ``1 - min_share`` of them are undefined."""
    if np.isfinite(draws).sum() < min_share * len(draws):
        return float("nan"), float("nan")
    low, high = percentile_interval(draws, level)
    return float(low), float(high)


def expected_layer_difference(words: pl.DataFrame, lower: str, higher: str, resamples: int, seed: int) -> tuple[float, np.ndarray]:
    """``E_Delta[higher] - E_Delta[lower]`` from the per-word table of :func:`layer_mix_label_sets`, and its draws
    ``[resamples]`` on dev resampled by sentence, the same sentences for both label sets (a paired bootstrap)."""
    correct, sentences = {}, {}
    for name in (lower, higher):
        frame = words.filter(pl.col("labels") == name).sort("layer", maintain_order=True)
        if not frame.height:
            raise ValueError(f"no cumulative probes for label set {name!r}; the table has {sorted(words['labels'].unique())}")
        layers = frame["layer"].n_unique()
        correct[name] = frame["correct"].to_numpy().reshape(layers, -1)
        sentences[name] = frame.filter(pl.col("layer") == 0)["sentence"].to_numpy()
    point = float(expected_layer(correct[higher].mean(axis=1)) - expected_layer(correct[lower].mean(axis=1)))
    draws = resampled_expected_layers(correct, sentences, resamples, seed)
    return point, draws[higher] - draws[lower]


def mean_expected_layers(summary: pl.DataFrame) -> str:
    """Per label set, the mean expected layer over the states that have one and how many do (``"upos 1.43 (9 of 10
    states)"``): a state whose layers add nothing has none (NaN), and one such state must not blank the mean."""
    rows = summary.group_by("labels").agg(
        mean=pl.col("expected_layer").fill_nan(None).mean(), defined=pl.col("expected_layer").is_not_nan().sum(),
        states=pl.len()).sort("labels").iter_rows(named=True)
    return ", ".join(f"{r['labels']} {'none' if r['mean'] is None else format(r['mean'], '.2f')} "
                     f"({r['defined']} of {r['states']} states)" for r in rows)


def mix_chart(cumulative: pl.DataFrame, summary: pl.DataFrame):
    """Tenney et al.'s figure 1 for every probed state: per label set (rows), the full mix's weight on each layer and
    each layer's differential score (columns), one line per state; the center of gravity and the expected layer are
    in the table beside it."""
    import altair as alt

    long = cumulative.unpivot(index=["state", "labels", "layer"], on=["mix_weight", "delta"], variable_name="measure",
                              value_name="value").with_columns(pl.col("measure").replace_strict(
                                  {"mix_weight": "mixing weight s_l (full mix)", "delta": "differential score Delta_l"}))
    base = alt.Chart(long.drop_nulls("value").to_pandas()).encode(
        x=alt.X("layer:O", title="layer (0 = embeddings)"), color=alt.Color("state:N"),
        tooltip=["state", "labels", "measure", "layer", alt.Tooltip("value:Q", format=".3f")])
    return (base.mark_line(point=True).encode(y=alt.Y("value:Q", title=None))
            .properties(width=240, height=150)
            .facet(row=alt.Row("labels:N", title=None), column=alt.Column("measure:N", title=None))
            .resolve_scale(y="independent"))
