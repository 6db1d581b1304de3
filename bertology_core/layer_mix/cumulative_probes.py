"""Where a label set's information sits across depth: Tenney et al. 2019's scalar mix and cumulative scoring.

Definitions, as in Tenney, Das and Pavlick 2019, "BERT Rediscovers the Classical NLP Pipeline", section 3, on layers
``0..L`` (0: the embeddings):

- *scalar mix*: a probe reads ``gamma * sum_l s_l h_l`` with ``s = softmax(a)``, the mixing weights ``a`` and the
  scale ``gamma`` trained with the probe. The *center of gravity* is ``E_s[l] = sum_l l * s_l``: where the
  weights lie, on average.
- *cumulative scoring*: probe ``P_l`` reads the scalar mix of layers ``0..l`` only; ``Score(P_l)`` is its dev
  accuracy (the paper's micro-averaged F1; for one label per word, as here, they are the same). The differential
  score ``Delta_l = Score(P_l) - Score(P_{l-1})`` (``l = 1..L``) is what layer ``l`` adds, and the *expected layer*
  is ``E_Delta[l] = sum_{l=1..L} l * Delta_l / sum_{l=1..L} Delta_l``: where, on average, the information is added.
  ``P_0`` reads the embeddings alone.

What differs from the paper: the probe is the probing stage's linear softmax regression on single words (their
edge probes pool a span and run a two-layer MLP); each layer is standardised on the training words before the mix
(the probing stage's standardisation, so a layer's weight is not a matter of its scale: BERT's layers differ in norm
by several times); training is the probing stage's (AdamW in minibatches, early stopping on held-out training
sentences, the weights of the epoch with the best held-out loss kept per probe). All ``L + 1`` cumulative probes
train together as one batched model, as :func:`bertology_core.probing.probes.fit_layer_probes` trains one probe per layer;
they do not interact. The full mix (the last cumulative probe) gives the mixing weights and the center of gravity.
When the differential scores sum to nothing (a label set no layer improves on the embeddings), the expected layer is
undefined (NaN): a negative or zero total would make it meaningless. Negative ``Delta_l`` are kept, as in the paper's
formula and the authors' notebook, but an expected layer outside ``[1, L]`` is undefined too (see
:func:`bertology_core.layer_mix.stats.expected_layer`).

Probe seeds (not in the paper, which reports no variance across runs): the cumulative probes are trained once per
probe seed (``layer_mix.probe_seeds``); a seed sets the minibatch order and which training sentences are held out for
early stopping (the initialisation is the probing stage's, all zeros: equal mixing weights, ``gamma`` 1). The
point estimates are the means over probe seeds of each seed's estimate, with the per-seed minimum and maximum beside
them; the interval resamples dev sentences and, in each resample, draws one probe seed at random
(:func:`bertology_core.layer_mix.stats.resampled_expected_layers`), so it covers what one probe training could give
as well as sentence sampling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from dataclasses import dataclass

import numpy as np
import polars as pl
import torch

from bertology_core.layer_mix.stats import center_of_gravity, expected_layer, resampled_expected_layers
from bertology_core.models.checkpoint import ArrayCheckpoint, Replay
from bertology_core.probing.probes import ProbeSettings, WordFeatures, held_out_sentences, label_set_data
from bertology_core.stats.bootstrap import DEFINED_SHARE, percentile_interval


@dataclass
class MixedProbes:
    """The cumulative probes: probe ``k`` mixes layers ``0..k``. ``mix`` ``[probes, layers]`` holds the softmax
    weights (0 above ``k``), ``gamma`` ``[probes]`` the scales; ``weight`` ``[probes, features, classes]``,
    ``bias`` ``[probes, classes]``; the per-layer standardisation; each probe's kept epoch."""

    mix: torch.Tensor
    gamma: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    best_epoch: np.ndarray
    epochs_run: int


TENSOR_FIELDS = ("mix", "gamma", "weight", "bias", "mean", "std")  # MixedProbes' tensors


def probe_settings(probe: Mapping, probe_seeds: Sequence[int]) -> list[ProbeSettings]:
    """One :class:`ProbeSettings` per probe seed: the optimiser settings ``probe`` (``layer_mix.probe``, which holds
    no seed) with each of ``probe_seeds`` (``layer_mix.probe_seeds``)."""
    if "seed" in probe:
        raise ValueError("layer_mix.probe.seed was replaced by layer_mix.probe_seeds (a list: one set of probes per seed)")
    if not probe_seeds or len(set(probe_seeds)) != len(probe_seeds):
        raise ValueError(f"probe seeds must be distinct and at least one, got {list(probe_seeds)}")
    return [ProbeSettings(**probe, seed=int(seed)) for seed in probe_seeds]


def _cumulative_mask(layers: int) -> torch.Tensor:
    """``[probes, layers]``: True where probe ``k`` may read layer ``l`` (``l <= k``)."""
    return torch.ones(layers, layers, dtype=torch.bool).tril()


def _mix_weights(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=1)


def _logits(x: torch.Tensor, mix: torch.Tensor, gamma: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``[probes, words, classes]`` from standardised ``x`` ``[layers, words, features]``."""
    mixed = torch.einsum("kl,lwf->kwf", mix, x) * gamma[:, None, None]
    return torch.einsum("kwf,kfc->kwc", mixed, weight) + bias[:, None]


WORDS_PER_CHUNK = 4096  # the mixes are [probes, words, features]: evaluated a chunk of words at a time


def _losses(features: WordFeatures, mean: torch.Tensor, std: torch.Tensor, y, mix, gamma, weight, bias) -> torch.Tensor:
    """Each probe's mean cross-entropy on the words of ``features`` (``[layers, words, features]``, standardised with
    ``mean`` and ``std``), gathered and standardised a chunk of words at a time."""
    total = torch.zeros(len(mix))
    for chunk, x in features.standardised(mean, std, WORDS_PER_CHUNK):
        logits = _logits(x, mix, gamma, weight, bias)
        target = y[chunk].expand(len(logits), -1)
        total += torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none").sum(dim=1)
    return total / max(1, features.shape[1])


def fit_cumulative_probes(train: np.ndarray | WordFeatures, train_labels: np.ndarray, num_classes: int, settings: ProbeSettings,
                          sentences: np.ndarray) -> MixedProbes:
    """Probes on the scalar mix of layers ``0..k`` for every ``k`` of ``train`` ``[layers, words, features]`` (an array or
    a :class:`~bertology_core.probing.probes.WordFeatures` view, minibatches gathered as they are drawn), trained
    together (a sum of independent losses) with the probing stage's optimiser and early stopping: the words of
    ``settings.validation_share`` of the training ``sentences`` are held out, each probe keeps its parameters from
    the epoch with its best held-out loss, and training stops when none improved for ``settings.patience`` epochs.
    Mixing weights start equal (``a = 0``) and ``gamma`` at 1; the weight decay applies to the classifier only."""
    generator = torch.Generator().manual_seed(settings.seed)
    held_mask = held_out_sentences(np.asarray(sentences), settings.validation_share, settings.seed)
    held = torch.from_numpy(held_mask)
    features_of = WordFeatures.of(train)
    fitted = features_of.subset(~held_mask)
    y_all = torch.from_numpy(np.asarray(train_labels, dtype=np.int64))
    y = y_all[~held]
    mean, std = fitted.statistics()
    std = std.clamp_min(1e-6)
    x_held, y_held = features_of.subset(held_mask), y_all[held]  # gathered a chunk at a time, each epoch
    layers, words, features = fitted.shape
    allowed = _cumulative_mask(layers)
    mix_logits = torch.zeros(layers, layers, requires_grad=True)
    gamma = torch.ones(layers, requires_grad=True)
    weight = torch.zeros(layers, features, num_classes, requires_grad=True)
    bias = torch.zeros(layers, num_classes, requires_grad=True)
    optimizer = torch.optim.AdamW([{"params": [weight, bias], "weight_decay": settings.weight_decay},
                                   {"params": [mix_logits, gamma], "weight_decay": 0.0}], lr=settings.learning_rate)
    parameters = (mix_logits, gamma, weight, bias)
    best = [p.detach().clone() for p in parameters]
    with torch.no_grad():
        best_loss = _losses(x_held, mean, std, y_held, _mix_weights(best[0], allowed), *best[1:])
    best_epoch = np.zeros(layers, dtype=np.int64)
    epoch = 0
    for epoch in range(1, settings.max_epochs + 1):
        order = torch.randperm(words, generator=generator)
        for start in range(0, words, settings.batch_size):
            rows = order[start : start + settings.batch_size]
            x = (torch.from_numpy(fitted.rows(rows.numpy())) - mean) / std
            logits = _logits(x, _mix_weights(mix_logits, allowed), gamma, weight, bias)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, num_classes), y[rows].repeat(layers)) * layers
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            losses = _losses(x_held, mean, std, y_held, _mix_weights(mix_logits, allowed), gamma, weight, bias)
            better = losses < best_loss
            best_loss = torch.where(better, losses, best_loss)
            for kept, current in zip(best, parameters):
                kept[better] = current[better]
        best_epoch[better.numpy()] = epoch
        if epoch - best_epoch.max() >= settings.patience:
            break
    mix = _mix_weights(best[0], allowed).detach()
    return MixedProbes(mix, best[1], best[2], best[3], mean, std, best_epoch, epoch)


@torch.no_grad()
def cumulative_correct(probes: MixedProbes, features: np.ndarray | WordFeatures, labels: np.ndarray) -> np.ndarray:
    """Whether each cumulative probe labels each word right, ``[probes, words]``, the words gathered and standardised a
    chunk at a time."""
    features = WordFeatures.of(features)
    predictions = np.concatenate([
        _logits(x, probes.mix, probes.gamma, probes.weight, probes.bias).argmax(-1).numpy()
        for _, x in features.standardised(probes.mean, probes.std, WORDS_PER_CHUNK)] or [np.zeros((len(probes.mix), 0), dtype=np.int64)], axis=1)
    return predictions == np.asarray(labels)[None, :]


def layer_mix_tables(labels: str, probes: MixedProbes | Sequence[MixedProbes], correct: np.ndarray, sentences: np.ndarray,
                     resamples: int, level: float, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """For one label set, from its cumulative probes of every probe seed (``probes``, one :class:`MixedProbes` per seed,
    or one) and their right/wrong ``correct`` ``[probe_seeds, probes, words]`` (``[probes, words]``: one seed):

    - the cumulative table, per probe ``k``: the accuracy, the differential score and the full mix's weight on layer
      ``k``, each the mean over probe seeds, the per-seed range (``_min``, ``_max``) of the last two, and the range of
      the epochs kept and the most epochs run;
    - the summary row: the center of gravity of the full mix and the expected layer, each the mean over probe seeds of
      one seed's estimate, with the per-seed range; the expected layer's percentile interval over dev sentences and
      probe seeds (each resample draws one seed at random: :func:`resampled_expected_layers`); both also as a share of
      the depth ``L``.

    The expected layer (its mean, range and share) is NaN unless it is defined (a positive total gain, within
    ``[1, L]``) for every probe seed on all of dev and in at least 99% of the resamples."""
    probes = [probes] if isinstance(probes, MixedProbes) else list(probes)
    correct = np.asarray(correct)
    correct = correct[None] if correct.ndim == 2 else correct
    if len(probes) != correct.shape[0]:
        raise ValueError(f"{len(probes)} probe seeds' probes but {correct.shape[0]} seeds' right/wrong words")
    scores = correct.mean(axis=-1)  # [probe_seeds, probes]
    seeds, layers = scores.shape
    mixes = np.stack([p.mix[-1].numpy().astype(float) for p in probes])  # [probe_seeds, layers]
    deltas = np.concatenate([np.full((seeds, 1), np.nan), np.diff(scores, axis=1)], axis=1)
    epochs = np.stack([p.best_epoch for p in probes])
    cumulative = pl.DataFrame({
        "labels": labels, "layer": np.arange(layers, dtype=np.int16), "probe_seeds": np.full(layers, seeds, np.int16),
        "cumulative_accuracy": scores.mean(axis=0), "delta": deltas.mean(axis=0), "delta_min": deltas.min(axis=0),
        "delta_max": deltas.max(axis=0), "mix_weight": mixes.mean(axis=0), "mix_weight_min": mixes.min(axis=0),
        "mix_weight_max": mixes.max(axis=0), "epoch_min": epochs.min(axis=0), "epoch_max": epochs.max(axis=0),
        "epochs_run_max": np.full(layers, max(p.epochs_run for p in probes)),
    })
    low, high = percentile_interval(resampled_expected_layers({labels: correct}, {labels: sentences}, resamples, seed)[labels],
                                    level, min_share=DEFINED_SHARE)
    depth = layers - 1
    # E_Delta divides by the layers' total gain over the embeddings; where that gain is not positive in 99% of the
    # resamples (an encoder whose layers add nothing, such as random weights) the ratio is noise over noise and can
    # land anywhere, so it is not reported; nor where one probe seed's own estimate is undefined.
    per_seed = expected_layer(scores)  # [probe_seeds]
    defined = bool(np.isfinite(low) and np.isfinite(per_seed).all())
    expected = per_seed if defined else np.full(seeds, np.nan)
    gravity = np.array([center_of_gravity(mix) for mix in mixes])
    summary = pl.DataFrame([{
        "labels": labels, "layers": depth, "probe_seeds": seeds, "center_of_gravity": float(gravity.mean()),
        "center_of_gravity_min": float(gravity.min()), "center_of_gravity_max": float(gravity.max()),
        "expected_layer": float(expected.mean()), "expected_layer_min": float(expected.min()),
        "expected_layer_max": float(expected.max()), "ci_low": low, "ci_high": high,
        "center_of_gravity_share": float(gravity.mean()) / depth, "expected_layer_share": float(expected.mean()) / depth,
        "embeddings_accuracy": float(scores[:, 0].mean()), "full_mix_accuracy": float(scores[:, -1].mean()),
        "gamma": float(np.mean([float(p.gamma[-1]) for p in probes])), "dev_words": int(correct.shape[-1]),
    }])
    return cumulative, summary


def layer_mix_label_sets(frames: dict[str, pl.DataFrame], tensors: dict[str, np.ndarray], label_specs: dict[str, dict],
                         settings: ProbeSettings | Sequence[ProbeSettings], min_label_count: int, lowercase: bool,
                         resamples: int, level: float, seed: int,
                         checkpoint: ArrayCheckpoint | None = None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Cumulative scalar-mix probes for every label set of ``label_specs`` on the probing stage's word features
    (the same words, labels and pairs as :func:`bertology_core.probing.probes.probe_label_sets`), trained once per probe seed:
    ``settings`` holds one :class:`ProbeSettings` per seed (:func:`probe_settings`), each with its own minibatch order
    and held-out sentences. Returns the cumulative table, the summary (center of gravity, expected layer and its
    interval over dev sentences and probe seeds: :func:`layer_mix_tables`) and every dev word's right/wrong per probe
    seed and cumulative probe (what paired comparisons between label sets resample). With a ``checkpoint``, each
    label set's probes of each seed fitted so far are saved once its interval has passed after a fit
    (:class:`~bertology_core.models.checkpoint.Replay`): a rerun after a kill reads them back and fits the rest."""
    settings = [settings] if isinstance(settings, ProbeSettings) else list(settings)
    cumulative, summaries, words = [], [], []
    replay = Replay(checkpoint)
    for name, spec in label_specs.items():
        data = label_set_data(frames, tensors, name, spec, min_label_count, lowercase)
        train, train_labels, train_sentences = data.x("train"), data.y("train"), data.words_sentences("train")
        dev, dev_labels, sentences = data.x("dev"), data.y("dev"), data.words_sentences("dev")

        def fit(seeded: ProbeSettings) -> dict[str, Any]:
            fitted = fit_cumulative_probes(train, train_labels, len(data.vocabulary), seeded, train_sentences)
            return {**{name: getattr(fitted, name).detach().cpu().numpy() for name in TENSOR_FIELDS},
                    "best_epoch": fitted.best_epoch, "epochs_run": fitted.epochs_run,
                    "correct": cumulative_correct(fitted, dev, dev_labels)}

        found = [replay(lambda seeded=seeded: fit(seeded)) for seeded in settings]
        probes = [MixedProbes(**{name: torch.from_numpy(np.array(one[name])) for name in TENSOR_FIELDS},
                              best_epoch=np.array(one["best_epoch"]), epochs_run=int(one["epochs_run"])) for one in found]
        correct = np.stack([one["correct"] for one in found])  # [probe_seeds, probes, words]
        table, summary = layer_mix_tables(name, probes, correct, sentences, resamples, level, seed)
        cumulative.append(table)
        summaries.append(summary.with_columns(pl.lit(len(data.vocabulary)).alias("classes")))
        seeds, layers, count = correct.shape
        words.append(pl.DataFrame({
            "labels": name, "probe_seed": np.repeat([s.seed for s in settings], layers * count).astype(np.int32),
            "layer": np.tile(np.repeat(np.arange(layers), count), seeds).astype(np.int16),
            "sentence": np.tile(sentences, seeds * layers).astype(np.int32), "correct": correct.reshape(-1),
        }))
    replay.finish()
    return pl.concat(cumulative), pl.concat(summaries), pl.concat(words)
