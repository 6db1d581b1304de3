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
train together as one batched model, as :func:`bertology_core.probing.fit_layer_probes` trains one probe per layer;
they do not interact. The full mix (the last cumulative probe) gives the mixing weights and the center of gravity.
When the differential scores sum to nothing (a label set no layer improves on the embeddings), the expected layer is
undefined (NaN): a negative or zero total would make it meaningless.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import torch

from bertology_core.layer_mix_stats import center_of_gravity, expected_layer, interval, resampled_expected_layers
from bertology_core.probing import ProbeSettings, held_out_sentences, label_set_data


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


def _losses(x, y, mix, gamma, weight, bias) -> torch.Tensor:
    """Each probe's mean cross-entropy on ``x`` ``[layers, words, features]``, a chunk of words at a time."""
    total = torch.zeros(len(mix))
    for start in range(0, x.shape[1], WORDS_PER_CHUNK):
        logits = _logits(x[:, start:start + WORDS_PER_CHUNK], mix, gamma, weight, bias)
        target = y[start:start + WORDS_PER_CHUNK].expand(len(logits), -1)
        total += torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none").sum(dim=1)
    return total / max(1, x.shape[1])


def fit_cumulative_probes(train: np.ndarray, train_labels: np.ndarray, num_classes: int, settings: ProbeSettings,
                          sentences: np.ndarray) -> MixedProbes:
    """Probes on the scalar mix of layers ``0..k`` for every ``k`` of ``train`` ``[layers, words, features]``, trained
    together (a sum of independent losses) with the probing stage's optimiser and early stopping: the words of
    ``settings.validation_share`` of the training ``sentences`` are held out, each probe keeps its parameters from
    the epoch with its best held-out loss, and training stops when none improved for ``settings.patience`` epochs.
    Mixing weights start equal (``a = 0``) and ``gamma`` at 1; the weight decay applies to the classifier only."""
    generator = torch.Generator().manual_seed(settings.seed)
    held = torch.from_numpy(held_out_sentences(np.asarray(sentences), settings.validation_share, settings.seed))
    x_all = torch.from_numpy(np.ascontiguousarray(train, dtype=np.float32))
    y_all = torch.from_numpy(np.asarray(train_labels, dtype=np.int64))
    x, y = x_all[:, ~held], y_all[~held]
    mean, std = x.mean(dim=1, keepdim=True), x.std(dim=1, keepdim=True).clamp_min(1e-6)
    x = (x - mean) / std
    x_held, y_held = (x_all[:, held] - mean) / std, y_all[held]
    layers, words, features = x.shape
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
        best_loss = _losses(x_held, y_held, _mix_weights(best[0], allowed), *best[1:])
    best_epoch = np.zeros(layers, dtype=np.int64)
    epoch = 0
    for epoch in range(1, settings.max_epochs + 1):
        order = torch.randperm(words, generator=generator)
        for start in range(0, words, settings.batch_size):
            rows = order[start : start + settings.batch_size]
            logits = _logits(x[:, rows], _mix_weights(mix_logits, allowed), gamma, weight, bias)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, num_classes), y[rows].repeat(layers)) * layers
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            losses = _losses(x_held, y_held, _mix_weights(mix_logits, allowed), gamma, weight, bias)
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
def cumulative_correct(probes: MixedProbes, features: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Whether each cumulative probe labels each word right, ``[probes, words]``."""
    x = (torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)) - probes.mean) / probes.std
    predictions = np.concatenate([
        _logits(x[:, start:start + WORDS_PER_CHUNK], probes.mix, probes.gamma, probes.weight, probes.bias).argmax(-1).numpy()
        for start in range(0, x.shape[1], WORDS_PER_CHUNK)] or [np.zeros((len(probes.mix), 0), dtype=np.int64)], axis=1)
    return predictions == np.asarray(labels)[None, :]


def layer_mix_tables(labels: str, probes: MixedProbes, correct: np.ndarray, sentences: np.ndarray, resamples: int,
                     level: float, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """For one label set: the cumulative table (per probe ``k``: its accuracy, the differential score, its mixing
    weight on each layer of the full mix) and the summary row (center of gravity of the full mix; expected layer with
    a percentile interval over dev sentences; both also as a share of the depth ``L``). The expected layer is NaN
    unless it is defined (a positive total gain) in at least 99% of the resamples."""
    scores = correct.mean(axis=1)
    layers = len(scores)
    full_mix = probes.mix[-1].numpy()
    cumulative = pl.DataFrame({
        "labels": labels, "layer": np.arange(layers, dtype=np.int16), "cumulative_accuracy": scores,
        "delta": np.concatenate([[np.nan], np.diff(scores)]), "mix_weight": full_mix.astype(float),
        "epoch": probes.best_epoch, "epochs_run": np.full(layers, probes.epochs_run),
    })
    low, high = interval(resampled_expected_layers({labels: correct}, {labels: sentences}, resamples, seed)[labels], level)
    depth = layers - 1
    # E_Delta divides by the layers' total gain over the embeddings; where that gain is not positive in 99% of the
    # sentence resamples (an encoder whose layers add nothing, such as random weights) the ratio is noise over
    # noise and can land anywhere, even beyond the last layer, so it is not reported.
    expected = float(expected_layer(scores)) if np.isfinite(low) else float("nan")
    gravity = center_of_gravity(full_mix)
    summary = pl.DataFrame([{
        "labels": labels, "layers": depth, "center_of_gravity": gravity, "expected_layer": expected,
        "ci_low": low, "ci_high": high, "center_of_gravity_share": gravity / depth,
        "expected_layer_share": expected / depth, "embeddings_accuracy": float(scores[0]), "full_mix_accuracy": float(scores[-1]),
        "gamma": float(probes.gamma[-1]), "dev_words": int(correct.shape[1]),
    }])
    return cumulative, summary


def layer_mix_label_sets(frames: dict[str, pl.DataFrame], tensors: dict[str, np.ndarray], label_specs: dict[str, dict],
                         settings: ProbeSettings, min_label_count: int, lowercase: bool, resamples: int, level: float,
                         seed: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Cumulative scalar-mix probes for every label set of ``label_specs`` on the probing stage's word features
    (the same words, labels and pairs as :func:`bertology_core.probing.probe_label_sets`). Returns the cumulative
    table, the summary (center of gravity, expected layer and its interval) and every dev word's right/wrong per
    cumulative probe (what paired comparisons between label sets resample)."""
    cumulative, summaries, words = [], [], []
    for name, spec in label_specs.items():
        data = label_set_data(frames, tensors, name, spec, min_label_count, lowercase)
        probes = fit_cumulative_probes(data.x("train"), data.y("train"), len(data.vocabulary), settings, data.words_sentences("train"))
        correct = cumulative_correct(probes, data.x("dev"), data.y("dev"))
        sentences = data.words_sentences("dev")
        table, summary = layer_mix_tables(name, probes, correct, sentences, resamples, level, seed)
        cumulative.append(table)
        summaries.append(summary.with_columns(pl.lit(len(data.vocabulary)).alias("classes")))
        words.append(pl.DataFrame({
            "labels": name, "layer": np.repeat(np.arange(correct.shape[0]), correct.shape[1]).astype(np.int16),
            "sentence": np.tile(sentences, correct.shape[0]).astype(np.int32), "correct": correct.reshape(-1),
        }))
    return pl.concat(cumulative), pl.concat(summaries), pl.concat(words)
