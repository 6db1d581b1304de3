"""Outlier LayerNorm dimensions (Kovaleva et al. 2021, "BERT Busters"): which dimensions they are, the configurations
that disable them or as many random dimensions, and the statistics of those disablings. Needs no torch
(:mod:`bertology_core.outliers.layernorms` reads the weights and runs the model).

The criterion. What the paper and its authors' blog state: the outliers are scaling factors (weights) and biases of the
*output* LayerNorm (BERT's ``output.LayerNorm``, the one that closes each layer after the MLP's residual sum) that fall
"out of the three sigma range", "in the same position" across the model's layers. How many layers a dimension must be
out of range in is not stated in what we could read of the paper; we follow public analysis code of this literature: a
weight or a bias is out of range when it lies more than ``sigmas`` (3) sample standard deviations from the mean of its
LayerNorm's vector (over that LayerNorm's hidden dimensions), and a dimension is an *outlier dimension* of the model when
its weight or its bias is out of range in more than ``min_layer_share`` of the LayerNorms (that code keeps dimensions out
of range in more than 3 of BERT-base's 12 layers: 0.25). Weights and biases are counted separately (a dimension
qualifies by either). A LayerNorm shared across depth (ALBERT) counts once. The attention-output LayerNorm is shown
beside it but does not take part in the criterion. On a shallow encoder the layer share counts few layers (more than
1.5 of 6), so the criterion is looser there than on BERT-base.

Disabling, as in the paper: a dimension's LayerNorm weight and bias are set to 0, in the same position in every layer,
so that LayerNorm outputs 0 there (the engine's ``*_norm.scale`` sites; equal to editing a copy's weights). The paper
disables the output LayerNorms; the attention-output LayerNorms, then both, are this pipeline's additions. The baseline is the same number of dimensions drawn at random among the non-outlier ones,
``draws`` times (a distribution, not one draw); each draw disables the same dimensions in all three placements, so the
placements are compared on the same draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import altair as alt
import numpy as np
import polars as pl

from bertology_core.data import states
from bertology_core.data.tables import repeated
from bertology_core.stats.bootstrap import PairedDeltas, Sentences, paired_deltas, resample_indices
from bertology_core.disabling.stats import by_configuration, pooled_over_seeds, seed_verdicts

NORMS = ("output_norm", "attention_norm")  # the engine's DepthParts fields (bertology_core.engine.structure)
CRITERION_NORM = "output_norm"
PARAMETERS = ("weight", "bias")
# placement -> the LayerNorms whose dimensions are disabled, in every layer
PLACEMENTS: dict[str, tuple[str, ...]] = {"output": ("output_norm",), "attention": ("attention_norm",),
                                          "both": ("output_norm", "attention_norm")}


@dataclass(frozen=True)
class Criterion:
    """The outlier criterion (config ``outliers``): ``sigmas`` from the layer's mean, in more than ``min_layer_share``
    of the layers."""

    sigmas: float
    min_layer_share: float


def standardised(parameters: pl.DataFrame) -> pl.DataFrame:
    """``parameters`` (norm, layer, dimension, weight, bias; :func:`bertology_core.outliers.layernorms.layernorm_parameters`) with
    ``z_weight`` and ``z_bias``: each value minus the mean of its LayerNorm's vector, over that vector's standard
    deviation (sample, ``ddof=1``, as ``torch.std``), per norm and layer; 0 for a constant vector."""
    def z(p: str) -> pl.Expr:
        spread = pl.col(p).std().over("norm", "layer")
        # a constant vector (a LayerNorm at its initial 1s and 0s) has no value away from its mean: z 0, not NaN
        return pl.when(spread > 0).then((pl.col(p) - pl.col(p).mean().over("norm", "layer")) / spread).otherwise(0.0)

    return parameters.with_columns(z(p).alias(f"z_{p}") for p in PARAMETERS)


def outlier_table(parameters: pl.DataFrame, criterion: Criterion) -> pl.DataFrame:
    """One row per hidden dimension: in how many layers its output-LayerNorm weight and bias are out of range, their
    largest ``|z|``, and whether it is an outlier dimension (module docstring)."""
    frame = standardised(parameters.filter(pl.col("norm") == CRITERION_NORM))
    if not frame.height:
        raise ValueError("no output LayerNorm parameters: the outlier criterion reads the output LayerNorms")
    layers = frame["layer"].n_unique()
    needed = criterion.min_layer_share * layers
    table = frame.group_by("dimension").agg(
        *[(pl.col(f"z_{p}").abs() > criterion.sigmas).sum().cast(pl.Int32).alias(f"{p}_layers") for p in PARAMETERS],
        *[pl.col(f"z_{p}").abs().max().alias(f"max_abs_z_{p}") for p in PARAMETERS],
    ).sort("dimension")
    return table.with_columns(
        (pl.max_horizontal(*[pl.col(f"{p}_layers") for p in PARAMETERS]) > needed).alias("outlier"),
        pl.lit(layers).alias("layers"))


def outlier_dimensions(table: pl.DataFrame) -> list[int]:
    """The outlier dimensions of :func:`outlier_table`, ascending."""
    return sorted(table.filter(pl.col("outlier"))["dimension"].to_list())


@dataclass(frozen=True)
class DimensionSet:
    """One configuration: ``dimensions`` disabled in the LayerNorms of ``placement`` in every layer (``kind``: intact,
    outliers or random; ``draw``: which random draw)."""

    name: str
    kind: str
    placement: str | None = None
    draw: int | None = None
    dimensions: tuple[int, ...] = ()

    @property
    def norms(self) -> tuple[str, ...]:
        return PLACEMENTS[self.placement] if self.placement else ()


def random_draws(outliers: Sequence[int], hidden: int, draws: int, seed: int) -> list[tuple[int, ...]]:
    """``draws`` sets of ``len(outliers)`` dimensions drawn without replacement among the other ``hidden - len(outliers)``
    dimensions (seeded)."""
    others = np.setdiff1d(np.arange(hidden), np.asarray(outliers, dtype=int))
    if len(outliers) > len(others):
        raise ValueError(f"{len(outliers)} outlier dimensions of {hidden}: too few others to draw as many at random")
    rng = np.random.default_rng(seed)
    return [tuple(sorted(int(d) for d in rng.choice(others, size=len(outliers), replace=False))) for _ in range(draws)]


def configurations(outliers: Sequence[int], hidden: int, draws: int, seed: int,
                   placements: Sequence[str] = tuple(PLACEMENTS)) -> list[DimensionSet]:
    """The intact model, then per placement the outliers and the random draws (the same draws in every placement);
    only the intact model when there is no outlier."""
    configs = [DimensionSet("intact", "intact")]
    if not outliers:
        return configs
    sets = random_draws(outliers, hidden, draws, seed)
    for placement in placements:
        configs.append(DimensionSet(f"outliers@{placement}", "outliers", placement, None, tuple(sorted(outliers))))
        configs += [DimensionSet(f"random{i + 1}@{placement}", "random", placement, i + 1, dims) for i, dims in enumerate(sets)]
    return configs


def predictions_frame(configs: Sequence[DimensionSet], idx: np.ndarray, labels: np.ndarray, predictions: np.ndarray,
                      intact_predictions: np.ndarray, regression: bool, word: np.ndarray | None = None) -> pl.DataFrame:
    """Tidy per-example predictions of every configuration: ``config, kind, placement, draw, dimensions, idx, label,
    prediction, intact_prediction`` (the intact model's in the configuration's own forward pass); a token task's rows
    are its words (``word``: each one's position in its example, :func:`bertology_core.data.tasks.scored_units`)."""
    n = len(idx)
    return pl.DataFrame({
        "config": repeated([c.name for c in configs], n, pl.String),
        "kind": repeated([c.kind for c in configs], n, pl.String),
        "placement": repeated([c.placement for c in configs], n, pl.String),
        "draw": repeated([c.draw for c in configs], n, pl.Int32),
        "dimensions": repeated([",".join(map(str, c.dimensions)) for c in configs], n, pl.String),
        "idx": np.tile(idx, len(configs)),
        **({"word": np.tile(word, len(configs))} if word is not None else {}),
        "label": np.tile(labels, len(configs)),
        "prediction": pl.Series(predictions.reshape(-1), dtype=pl.Float64 if regression else pl.Int64),
        "intact_prediction": pl.Series(intact_predictions.reshape(-1), dtype=pl.Float64 if regression else pl.Int64),
    })


CONFIG_COLUMNS = ["config", "kind", "placement", "draw", "dimensions"]
DELTA_SCHEMA = {"config": pl.String, "kind": pl.String, "placement": pl.String, "draw": pl.Int32, "dimensions": pl.String,
                "seed": pl.Int64, "delta": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64, "verdict": pl.String,
                "seeds": pl.Int32, "metric": pl.String, "examples": pl.Int32}
CONTRAST_SCHEMA = {"placement": pl.String, "seed": pl.Int64, "outliers_delta": pl.Float64, "random_mean_delta": pl.Float64,
                   "random_low": pl.Float64, "random_high": pl.Float64, "random_worst": pl.Float64,
                   "random_at_or_below_outliers": pl.Float64, "draws": pl.Int32, "difference": pl.Float64,
                   "ci_low": pl.Float64, "ci_high": pl.Float64, "minus_worst": pl.Float64, "worst_ci_low": pl.Float64,
                   "worst_ci_high": pl.Float64, "pooled_seeds": pl.String, "seeds_without_outliers": pl.String}


def _arrays(frame: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One seed's configurations (intact first), labels, predictions ``[C, n]``, the intact model's predictions in each
    configuration's own pass ``[C, n]`` and each unit's example idx, in idx order (a token task's: then word order)."""
    configs = frame.select(CONFIG_COLUMNS).unique(maintain_order=True).with_columns(
        (pl.col("kind") != "intact").alias("_later")).sort("_later", "placement", "kind", "draw", nulls_last=True).drop("_later")
    keys = ["idx", "word"] if "word" in frame.columns else ["idx"]
    units = frame.filter(pl.col("kind") == "intact").sort(keys)
    predictions, intact = (by_configuration(frame, configs, units.select(keys), column) for column in ("prediction", "intact_prediction"))
    return configs, units["label"].to_numpy(), predictions, intact, units["idx"].to_numpy()


def disabling_statistics(runs: dict[int, pl.DataFrame], metric: str, resamples: int, level: float, seed: int,
                         label_names: tuple[str, ...] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The disablings of one task's models (``runs``: seed -> :func:`predictions_frame` of that seed's model).

    Returns the deltas (every configuration's score minus the intact model's, per seed and across seeds, with paired
    bootstrap intervals over dev examples and the disabling stage's verdict rule across seeds) and the contrast per
    placement: the outliers' delta, the random draws' deltas (mean, their 2.5 and 97.5 percentiles, the share of draws
    that cost at least as much as the outliers), and the outliers' delta minus the mean random delta (``difference``) and
    minus the worst random draw's (``minus_worst``, the worst draw taken anew on every resample), each with a paired
    interval (the same example resamples for every configuration). Across seeds the random statistics pool the seeds'
    mean deltas draw by draw: each seed's draw has as many dimensions as that seed's outliers, so a draw is matched to
    its own model's outliers even when the seeds' outlier sets differ. A seed whose model has no outlier dimension has
    nothing to compare and is left out (``pooled_seeds`` names the rest, ``seeds_without_outliers`` those). Every seed
    must be scored on the same dev examples with the same configurations (placements and draws). A token task's rows
    are words and its resamples draw sentences (``label_names``: its labels, from which a BIO task's spans are read).
    """
    per_seed, frames = {}, []
    labels_first = None
    without = ",".join(str(s) for s, frame in sorted(runs.items()) if frame["kind"].n_unique() == 1)
    runs = {s: frame for s, frame in runs.items() if frame["kind"].n_unique() > 1}  # a model without outliers: nothing to compare
    if not runs:
        return pl.DataFrame(schema=DELTA_SCHEMA), pl.DataFrame(schema=CONTRAST_SCHEMA)
    sentences = None
    for seed_value in sorted(runs):
        configs, labels, predictions, intact, idx = _arrays(runs[seed_value])
        if labels_first is None:
            labels_first, idx_first, shared_configs = labels, idx, configs
            sentences = Sentences.of_runs(idx, label_names) if "word" in runs[seed_value].columns else None
            examples = len(labels) if sentences is None else len(sentences)
            indices = resample_indices(examples, resamples, seed)
        elif not np.array_equal(idx, idx_first) or configs.select("kind", "placement", "draw").rows() != shared_configs.select(
                "kind", "placement", "draw").rows():
            raise ValueError(f"seed {seed_value}: its disablings cover other examples or configurations than seed {min(runs)}'s "
                             "(every seed must be scored on the same dev sample with the same number of random draws)")
        per_seed[seed_value] = (configs, paired_deltas(metric, predictions[1:], intact[1:], labels, indices, sentences))
    seeds = sorted(per_seed)
    pooled = pooled_over_seeds([per_seed[s][1] for s in seeds])
    for seed_value, (configs, deltas) in [*per_seed.items(), (None, (shared_configs, pooled))]:
        low, high = deltas.interval(level)
        frames.append(configs[1:].with_columns(
            pl.lit(seed_value, dtype=pl.Int64).alias("seed"), pl.Series("delta", deltas.delta), pl.Series("ci_low", low),
            pl.Series("ci_high", high)))
    # the across-seed rows name their dimensions only where every pooled seed disables the same ones
    same = all(per_seed[s][0]["dimensions"].to_list() == shared_configs["dimensions"].to_list() for s in per_seed)
    frames[-1] = frames[-1].with_columns(pl.col("dimensions") if same else pl.lit("per seed").alias("dimensions"))
    deltas_table = pl.concat(frames)
    stacked = np.stack([per_seed[s][1].delta for s in seeds])
    low, high = pooled.interval(level)
    verdict = pl.Series("verdict", seed_verdicts(stacked, low, high))
    deltas_table = deltas_table.join(
        shared_configs[1:].select("config").with_columns(verdict, pl.lit(len(seeds), dtype=pl.Int32).alias("seeds")), on="config", how="left")
    pooled_seeds = ",".join(map(str, seeds))  # a seed whose model has no outlier dimension is not among them
    contrast = pl.concat([_contrast(configs, deltas, seed_value, level).with_columns(
        pl.lit(str(seed_value) if seed_value is not None else pooled_seeds).alias("pooled_seeds"),
        pl.lit(without if seed_value is None else "").alias("seeds_without_outliers"))
        for seed_value, (configs, deltas) in [*per_seed.items(), (None, (shared_configs, pooled))]])
    deltas_table = deltas_table.with_columns(pl.lit(metric).alias("metric"), pl.lit(examples, dtype=pl.Int32).alias("examples"))
    return deltas_table.select(list(DELTA_SCHEMA)).cast(DELTA_SCHEMA), contrast


def _contrast(configs: pl.DataFrame, deltas: PairedDeltas, seed_value: int | None, level: float) -> pl.DataFrame:
    rows = []
    kinds, placements = configs["kind"].to_list()[1:], configs["placement"].to_list()[1:]
    for placement in dict.fromkeys(p for p in placements if p is not None):
        outliers = [i for i, (k, p) in enumerate(zip(kinds, placements)) if k == "outliers" and p == placement]
        randoms = [i for i, (k, p) in enumerate(zip(kinds, placements)) if k == "random" and p == placement]
        if not outliers or not randoms:
            continue
        out, rand = deltas.delta[outliers[0]], deltas.delta[randoms]
        resampled = deltas.resampled[outliers[0]]
        # against the random mean (any loss beyond chance), and against the worst draw on each resample (a loss larger
        # than every random draw's: the paper's contrast of a large loss with none)
        difference = PairedDeltas(np.array([out - rand.mean(), out - rand.min()]),
                                  np.stack([resampled - deltas.resampled[randoms].mean(axis=0),
                                            resampled - deltas.resampled[randoms].min(axis=0)]))
        low, high = difference.interval(level)
        rows.append({"placement": placement, "seed": seed_value, "outliers_delta": float(out),
                     "random_mean_delta": float(rand.mean()), "random_low": float(np.quantile(rand, 0.025)),
                     "random_high": float(np.quantile(rand, 0.975)), "random_worst": float(rand.min()),
                     "random_at_or_below_outliers": float(np.mean(rand <= out)), "draws": len(randoms),
                     "difference": float(difference.delta[0]), "ci_low": float(low[0]), "ci_high": float(high[0]),
                     "minus_worst": float(difference.delta[1]), "worst_ci_low": float(low[1]), "worst_ci_high": float(high[1])})
    return pl.DataFrame(rows, schema={k: v for k, v in CONTRAST_SCHEMA.items() if k not in ("pooled_seeds", "seeds_without_outliers")})


def dimensions_summary(dimensions: pl.DataFrame) -> pl.DataFrame:
    """One row per model state and outlier dimension (``dimension`` null for a state with none; ``not_applicable``
    for a pre-LayerNorm encoder), and whether the pre-trained encoder has the same outlier (fine-tuning keeps it)."""
    keys = ["state", "task", "seed"]
    applicable = dimensions.filter(pl.col("dimension").is_not_null()) if "dimension" in dimensions.columns else pl.DataFrame()
    rows = []
    if applicable.height:
        pretrained = set(applicable.filter((pl.col("state") == states.PRETRAINED) & pl.col("outlier"))["dimension"].to_list())
        for key, frame in applicable.group_by(keys, maintain_order=True):
            found = frame.filter(pl.col("outlier")).sort("dimension")
            base = dict(zip(keys, key)) | {"outliers": found.height, "layers": int(frame["layers"][0])}
            if not found.height:
                rows.append(base | {"dimension": None})
            for r in found.iter_rows(named=True):
                rows.append(base | {k: r[k] for k in ("dimension", "weight_layers", "bias_layers", "max_abs_z_weight", "max_abs_z_bias")}
                            | {"in_pretrained": r["dimension"] in pretrained})
    if "not_applicable" in dimensions.columns:
        for r in dimensions.filter(pl.col("not_applicable").is_not_null()).iter_rows(named=True):
            rows.append({k: r[k] for k in keys} | {"outliers": None, "not_applicable": r["not_applicable"]})
    schema = {"state": pl.String, "task": pl.String, "seed": pl.Int64, "outliers": pl.Int64, "layers": pl.Int64,
              "dimension": pl.Int64, "weight_layers": pl.Int64, "bias_layers": pl.Int64, "max_abs_z_weight": pl.Float64,
              "max_abs_z_bias": pl.Float64, "in_pretrained": pl.Boolean, "not_applicable": pl.String}
    return pl.DataFrame(rows, schema=schema)


def parameters_chart(parameters: pl.DataFrame, summary: pl.DataFrame):
    """The pre-trained encoder's LayerNorm weights and biases per dimension, one line per layer (the paper's fig. 1),
    for the output and the attention-output LayerNorm; its outlier dimensions marked."""
    frame = parameters.filter(pl.col("state") == states.PRETRAINED).unpivot(
        index=["norm", "layer", "dimension"], on=list(PARAMETERS), variable_name="parameter", value_name="value")
    marked = summary.filter((pl.col("state") == states.PRETRAINED) & pl.col("dimension").is_not_null()).select("dimension")
    return _faceted(frame, marked)


def _faceted(frame: pl.DataFrame, marked: pl.DataFrame):
    charts = []
    for parameter in PARAMETERS:
        row = []
        for norm in NORMS:
            part = frame.filter((pl.col("parameter") == parameter) & (pl.col("norm") == norm))
            lines = alt.Chart(part.to_pandas()).mark_line(strokeWidth=0.8, opacity=0.8).encode(
                x=alt.X("dimension:Q", title="hidden dimension"), y=alt.Y("value:Q", title=f"{norm} {parameter}"),
                color=alt.Color("layer:O", scale=alt.Scale(scheme="viridis")),
                tooltip=["layer", "dimension", alt.Tooltip("value:Q", format=".3f")])
            layer = lines
            if marked.height:
                layer = lines + alt.Chart(marked.to_pandas()).mark_rule(color="red", strokeDash=[3, 3], opacity=0.6).encode(x="dimension:Q")
            row.append(layer.properties(width=380, height=130))
        charts.append(alt.hconcat(*row))
    return alt.vconcat(*charts)


def contrast_chart(deltas: pl.DataFrame):
    """Per task (columns) and placement (rows): every random draw's delta across seeds (grey ticks) and the outliers'
    delta with its interval (red)."""
    pooled = deltas.filter(pl.col("seed").is_null() & (pl.col("kind") != "intact")).with_columns(
        (pl.col("delta") * 100).alias("delta_points"), (pl.col("ci_low") * 100).alias("low"), (pl.col("ci_high") * 100).alias("high"))
    base = alt.Chart(pooled.to_pandas())
    ticks = base.transform_filter(alt.datum.kind == "random").mark_tick(color="grey", opacity=0.6, thickness=1).encode(
        x=alt.X("delta_points:Q", title="dev score change (points), mean over seeds"), tooltip=["config", "dimensions", alt.Tooltip("delta_points:Q", format=".2f")])
    point = base.transform_filter(alt.datum.kind == "outliers").mark_point(color="red", filled=True, size=60).encode(
        x="delta_points:Q", tooltip=["config", "dimensions", alt.Tooltip("delta_points:Q", format=".2f")])
    rule = base.transform_filter(alt.datum.kind == "outliers").mark_rule(color="red").encode(x="low:Q", x2="high:Q")
    return alt.layer(ticks, rule, point).properties(width=260, height=40).facet(
        row=alt.Row("placement:N", title=None), column=alt.Column("task:N", title=None))
