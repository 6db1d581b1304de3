"""Tenney et al. 2019's measures from cumulative probe scores: the center of gravity, the expected layer and their
resampled intervals over dev sentences and probe seeds (:mod:`bertology_core.layer_mix.cumulative_probes` trains the probes; this module
needs no torch)."""

from __future__ import annotations

import altair as alt
import numpy as np
import polars as pl

from bertology_core.stats.bootstrap import resample_indices


def center_of_gravity(mix: np.ndarray) -> float:
    """``E_s[l] = sum_l l * s_l`` of one probe's mixing weights ``[layers]`` (layer 0: the embeddings)."""
    mix = np.asarray(mix, dtype=float)
    return float((np.arange(len(mix)) * mix).sum() / mix.sum())


_SLACK = 1e-9  # rounding: one nonzero Delta_l gives exactly l, up to the last bit


def expected_layer(scores: np.ndarray) -> np.ndarray:
    """``E_Delta[l]`` from the cumulative scores ``[..., layers]`` (``Score(P_0) .. Score(P_L)``).

    Tenney et al.'s formula as it stands: negative differential scores are kept (as in the authors' notebook), so the
    "expectation" is a ratio of signed sums, not a mean under a distribution. It is undefined (NaN) where the
    differential scores do not sum to a positive number, and where the ratio falls outside ``[1, L]`` (``L`` the
    highest layer): with every ``Delta_l >= 0`` it cannot, so an estimate out there only comes from gains and losses
    that largely cancel (a small total under a large weighted sum), and its size is noise over noise."""
    scores = np.asarray(scores, dtype=float)
    deltas = np.diff(scores, axis=-1)
    layers = np.arange(1, scores.shape[-1])
    total = deltas.sum(axis=-1)
    weighted = (deltas * layers).sum(axis=-1)
    ratio = np.divide(weighted, total, out=np.full(np.shape(total), np.nan), where=total > 0)
    with np.errstate(invalid="ignore"):
        inside = (ratio >= 1 - _SLACK) & (ratio <= scores.shape[-1] - 1 + _SLACK)
    return np.where(inside, ratio, np.nan)


def probe_seed_draws(probe_seeds: int, resamples: int, seed: int) -> np.ndarray:
    """``[resamples]``: the probe seed (an index) each resample uses, uniform and independent of the sentence draws
    (its own stream, from ``(seed, 1)``); all zeros for one probe seed."""
    return np.random.default_rng([seed, 1]).integers(0, probe_seeds, size=resamples)


def _by_seed(correct: np.ndarray) -> np.ndarray:
    """``[probe_seeds, probes, words]``; a ``[probes, words]`` array is one probe seed."""
    correct = np.asarray(correct)
    return correct[None] if correct.ndim == 2 else correct


def resampled_expected_layers(correct: dict[str, np.ndarray], sentences: dict[str, np.ndarray], resamples: int,
                               seed: int) -> dict[str, np.ndarray]:
    """Each label set's expected layer ``[resamples]`` on dev resampled by sentence (the words of one sentence are not
    independent) and by probe seed: every draw takes as many sentences as the label sets cover together, with
    replacement, and one probe seed uniformly at random, the same sentences and the same seed for every label set (so
    differences between them are paired), and scores all the words of those sentences with that seed's probes. The
    interval therefore covers what one probe training could have given on another sample of sentences, not the
    sentence noise around one training (Tenney et al. report no variance across runs).

    ``correct[name]`` is ``[probe_seeds, probes, words]`` (or ``[probes, words]``: one seed), the same seeds in the same
    order for every label set; ``sentences[name]`` the sentence of each word. One probe seed gives the draws of the
    sentence bootstrap alone."""
    correct = {name: _by_seed(c) for name, c in correct.items()}
    seeds = {c.shape[0] for c in correct.values()}
    if len(seeds) > 1:
        raise ValueError(f"the label sets hold different numbers of probe seeds: { {n: c.shape[0] for n, c in correct.items()} }")
    universe = np.unique(np.concatenate([np.asarray(s) for s in sentences.values()]))
    draws = resample_indices(len(universe), resamples, seed)  # [resamples, sentences]
    chosen = probe_seed_draws(seeds.pop() if seeds else 1, resamples, seed)  # [resamples]
    out = {}
    for name, right_words in correct.items():
        position = np.searchsorted(universe, sentences[name])
        right = np.zeros(right_words.shape[:2] + (len(universe),))  # [probe_seeds, probes, sentences]
        np.add.at(np.moveaxis(right, -1, 0), position, np.moveaxis(right_words, -1, 0).astype(float))
        counts = np.bincount(position, minlength=len(universe)).astype(float)
        totals = counts[draws].sum(axis=-1)  # [resamples]
        scores = np.full((resamples, right.shape[1]), np.nan)
        for k in np.unique(chosen):
            rows = np.flatnonzero(chosen == k)
            scores[rows] = np.divide(right[k][:, draws[rows]].sum(axis=-1).T, totals[rows, None],
                                     out=np.full((len(rows), right.shape[1]), np.nan), where=totals[rows, None] > 0)
        out[name] = expected_layer(scores)
    return out


def words_correct(words: pl.DataFrame, name: str) -> tuple[list, np.ndarray, np.ndarray]:
    """From the per-word table of :func:`bertology_core.layer_mix.cumulative_probes.layer_mix_label_sets`, label set ``name``'s probe
    seeds (sorted; ``[None]`` for a table written before it had a ``probe_seed`` column: one seed), right or wrong
    ``[probe_seeds, probes, words]`` and each word's sentence."""
    frame = words.filter(pl.col("labels") == name)
    if not frame.height:
        raise ValueError(f"no cumulative probes for label set {name!r}; the table has {sorted(words['labels'].unique())}")
    if "probe_seed" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, pl.Int32).alias("probe_seed"))
    frame = frame.sort("probe_seed", "layer", maintain_order=True)
    seeds = frame["probe_seed"].unique(maintain_order=True).to_list()
    layers = frame["layer"].n_unique()
    if frame.height % (len(seeds) * layers):
        raise ValueError(f"label set {name!r}: the probe seeds {seeds} and {layers} layers do not cover the same words")
    correct = frame["correct"].to_numpy().reshape(len(seeds), layers, -1)
    first = frame.filter((pl.col("layer") == 0) & (pl.col("probe_seed").eq_missing(seeds[0])))
    return seeds, correct, first["sentence"].to_numpy()


def expected_layer_difference(words: pl.DataFrame, lower: str, higher: str, resamples: int, seed: int) -> tuple[float, np.ndarray]:
    """``E_Delta[higher] - E_Delta[lower]`` from the per-word table of :func:`layer_mix_label_sets`, and its draws
    ``[resamples]``. Both label sets' probes must come from the same probe seeds, paired by seed: the point is the mean
    over probe seeds of each seed's difference (NaN when one is undefined); each draw resamples dev sentences, the
    same for both label sets, and draws one probe seed at random, the same for both (a paired bootstrap over
    sentences and probe training, as :func:`resampled_expected_layers`). A table without ``probe_seed`` is one seed."""
    seeds, correct, sentences = {}, {}, {}
    for name in (lower, higher):
        seeds[name], correct[name], sentences[name] = words_correct(words, name)
    if seeds[lower] != seeds[higher]:
        raise ValueError(f"label sets {lower!r} and {higher!r} have different probe seeds ({seeds[lower]} and "
                         f"{seeds[higher]}): their differences cannot be paired")
    differences = expected_layer(correct[higher].mean(axis=-1)) - expected_layer(correct[lower].mean(axis=-1))
    point = float(differences.mean())
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
