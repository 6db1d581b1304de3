"""Head roles (Voita et al. 2019, "Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy Lifting,
the Rest Can Be Pruned", sections 4-5), measured on attention dumps.

Definitions, as in the paper, with what an encoder with [CLS]/[SEP] changes:

- **Confidence** (section 4.2): "the average of its maximum attention weight excluding the end of sentence
  symbol, where average is taken over tokens in a set of sentences". The end-of-sentence symbol is the NMT
  encoder's attention sink; BERT-style encoders sink attention into their special tokens ([SEP], and [CLS]:
  Clark et al. 2019), so every special token is left out here, both as the token whose attention is read (query)
  and as a key the maximum is taken over. The weights are not renormalised.
- **Positional** (section 5.1): a head is positional when "at least 90% of the time its maximum attention weight
  is assigned to a specific relative position (in practice either -1 or +1)". For every real (non-special) query
  token the key of its maximum weight is taken over *all* keys (a head whose maximum is [SEP] is not positional);
  the head's dominant offset is its most frequent (key - query) and ``positional_share`` that offset's share.
  The role holds when the share reaches ``positional_share`` (0.9) for any offset, as the paper's definition says.
- **Rare tokens** (section 5.3): a head "points to the least frequent tokens in a sentence". Frequency is counted
  in word pieces (the model's own tokens) over the task's training text: the head sees pieces, and Voita et al.'s
  NMT models counted their own (BPE) tokens the same way; each piece counts on its own, so a word split into pieces
  has one rare piece or several. ``rare_share`` is the share of real query tokens whose maximum weight (over all keys) falls on a
  rarest real token of the example (several when tied). The paper names the head that does this most and sets no
  threshold; the role here needs ``rare_share`` >= ``rare_share`` of the config (0.5: the majority of tokens, our
  choice, fixed before any run). There is no chance baseline: in a short example several pieces may tie as rarest.
- **Syntactic** (section 5.2): a head is syntactic for a dependency relation when its accuracy (Clark et al.'s
  "most attended word is the relation's head") is "at least 10% higher than" the baseline that predicts the most
  frequent relative position for that relation: accuracy - baseline >= 0.10 (absolute), for the paper's four major
  relations (nsubj, dobj, amod, advmod; UD's obj for dobj: the config's ``syntactic_relations``), from the probing
  stage's syntactic-head tables (:mod:`bertology_core.syntactic_heads`) on UD EWT, not the GLUE dev text of the
  other roles. Only the pre-trained encoder and the fine-tuned models the probing stage scores have a verdict;
  ``specialised`` (any role) is null where it is unknown.

Everything is counted over every real query token of every example in the dump (the dump's seeded sample of the
task's dev set): what the paper averages over. The maximum is ``argmax``'s: on a tie the first key (leftmost) wins.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl

from bertology_core import states

ROLES = ("positional", "rare", "syntactic")


@dataclass(frozen=True)
class RoleThresholds:
    """The shares that give a head a role (the config's ``head_roles.thresholds``)."""

    positional_share: float = 0.9  # Voita et al. 5.1
    rare_share: float = 0.5  # not in the paper (it names the one head that does it most): ours
    syntactic_margin: float = 0.10  # Voita et al. 5.2, absolute accuracy over the best offset baseline

    def __post_init__(self) -> None:
        for name in ("positional_share", "rare_share", "syntactic_margin"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"head_roles.thresholds.{name} = {value}: a share in (0, 1]. Fix: set it between 0 and 1.")


def piece_frequencies(tokenizer, texts: Iterable[str | None]) -> Counter:
    """How often each word piece (the tokenizer's token string, as dumps store it) occurs in ``texts``, without
    special tokens and without truncation. ``None`` entries (a single-sentence task's second sentence) are skipped."""
    texts = [text for text in texts if text]
    counts: Counter = Counter()
    for start in range(0, len(texts), 2048):
        for ids in tokenizer(texts[start:start + 2048], add_special_tokens=False)["input_ids"]:
            counts.update(ids)
    by_token: Counter = Counter()
    for token, i in zip(tokenizer.convert_ids_to_tokens(list(counts)), list(counts)):
        by_token[token] += counts[i]  # two ids may spell the same piece
    return by_token


@dataclass
class ExampleTokens:
    """What the roles need of one dumped example: which positions are real tokens, and the rarest of them."""

    real: np.ndarray  # [L] bool: not a special token
    rarest: np.ndarray  # [L] bool: a real token of the lowest training frequency in the example

    @classmethod
    def from_dump_row(cls, tokens: list[str], segment_ids: list[int | None], frequencies: Counter) -> "ExampleTokens":
        real = np.array([segment is not None for segment in segment_ids], dtype=bool)
        counts = np.array([frequencies.get(token, 0) if is_real else np.inf for token, is_real in zip(tokens, real)], dtype=float)
        rarest = real & (counts == counts[real].min()) if real.any() else np.zeros_like(real)
        return cls(real=real, rarest=rarest)


class RoleCounts:
    """Per (layer, head) sums over query tokens; :meth:`table` turns them into the roles table."""

    def __init__(self, num_layers: int, num_heads: int, max_length: int):
        shape = (num_layers, num_heads)
        self.queries = np.zeros(shape, dtype=np.int64)
        self.confidence_sum = np.zeros(shape)
        self.rare_hits = np.zeros(shape, dtype=np.int64)
        self.max_length = max_length
        # offsets -(max_length - 1) .. max_length - 1 of the most attended key
        self.offsets = np.zeros((*shape, 2 * max_length - 1), dtype=np.int64)
        self.examples = 0

    def add(self, maps: np.ndarray, example: ExampleTokens) -> None:
        """Count one example: ``maps`` ``[layers, heads, L, L]`` (query, key) of every head."""
        real, queries = example.real, np.flatnonzero(example.real)
        if not queries.size:
            return
        rows = maps[:, :, queries, :]  # [layers, heads, Q, L]
        attended = rows.argmax(-1)  # over every key
        self.queries += queries.size
        layers, heads, width = self.offsets.shape
        shifted = attended - queries + self.max_length - 1  # [layers, heads, Q] in 0 .. width - 1
        cells = (np.arange(layers * heads)[:, None] * width + shifted.reshape(layers * heads, -1)).reshape(-1)
        self.offsets += np.bincount(cells, minlength=layers * heads * width).reshape(layers, heads, width)
        self.rare_hits += example.rarest[attended].sum(-1)
        self.confidence_sum += rows[..., real].max(-1).sum(-1)
        self.examples += 1

    def table(self) -> pl.DataFrame:
        """One row per (layer, head): ``queries``, ``confidence``, ``positional_offset`` (the dominant key - query),
        ``positional_share`` (its share of the queries), ``rare_share``."""
        layers, heads = self.queries.shape
        dominant = self.offsets.argmax(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.take_along_axis(self.offsets, dominant[..., None], -1)[..., 0] / self.queries
            confidence = self.confidence_sum / self.queries
            rare = self.rare_hits / self.queries
        return pl.DataFrame({
            "layer": np.repeat(np.arange(layers), heads).astype(np.int32),
            "head": np.tile(np.arange(heads), layers).astype(np.int32),
            "examples": np.full(layers * heads, self.examples, dtype=np.int64),
            "queries": self.queries.reshape(-1),
            "confidence": confidence.reshape(-1),
            "positional_offset": (dominant - (self.max_length - 1)).reshape(-1).astype(np.int32),
            "positional_share": share.reshape(-1),
            "rare_share": rare.reshape(-1),
        }).with_columns(pl.col(pl.Float64).fill_nan(None))


def dump_roles(dump, frequencies: Counter) -> pl.DataFrame:
    """The roles table of one attention dump (:class:`bertology_core.dumps.AttentionDump`): every example, every
    head. Reads one example's maps at a time (all its layers and heads)."""
    from bertology_core.dumps import dequantise

    tokens = dump.tokens()
    examples = {row["example"]: ExampleTokens.from_dump_row(row["tokens"], row["segment_ids"], frequencies)
                for row in tokens.select("example", "tokens", "segment_ids").iter_rows(named=True)}
    if not any(example.real.any() for example in examples.values()):
        raise ValueError(f"{dump.tokens_path}: no example has a real (non-special) token, so no head has a role to "
                         "measure. Fix: dump examples with text (attention.max_examples, the task's dev split).")
    shape = dump.scan().select(pl.col("layer").max() + 1, pl.col("head").max() + 1, pl.col("length").max()).collect().row(0)
    num_layers, num_heads, max_length = (int(v) for v in shape)
    counts = RoleCounts(num_layers, num_heads, max_length)
    # examples are stored in row groups by batch: reading a batch of examples at a time keeps memory small
    order = sorted(examples)
    for start in range(0, len(order), 64):
        chunk = order[start:start + 64]
        frame = dump.scan().filter(pl.col("example").is_between(chunk[0], chunk[-1])).select(
            "example", "layer", "head", "length", "weights").collect().sort("example", "layer", "head")
        for (example,), group in frame.group_by("example", maintain_order=True):
            length = int(group["length"][0])
            values = np.stack([np.asarray(w, dtype=np.uint16) for w in group["weights"]])
            maps = dequantise(values, dump.scale).reshape(num_layers, num_heads, length, length)
            counts.add(maps, examples[example])
    return counts.table()


def probed_name(task: str, state: str, seed: int | None) -> str | None:
    """The probing stage's name of a dumped state: ``pretrained``, ``<TASK>_seed<N>`` for a model fine-tuned from the
    pre-trained encoder; None for any other (a model fine-tuned from scratch is never probed)."""
    if state == states.PRETRAINED:
        return state
    return states.seeded(task, seed) if state == states.FINETUNED and seed is not None else None


def assign_roles(roles: pl.DataFrame, thresholds: RoleThresholds, syntactic: pl.DataFrame | None = None) -> pl.DataFrame:
    """Add the role columns to a roles table (one row per task, state, seed, layer and head): ``positional``, ``rare``
    (bools by the thresholds) and ``syntactic`` with its ``syntactic_relation`` from ``syntactic``
    (:func:`best_relation_margins`: probed state, layer, head, best_relation, relation_margin; probed states are named
    as :func:`probed_name` names them), null where the probing stage did not score the state; ``specialised``: any
    role; ``roles``: their names joined by + (or none)."""
    frame = roles.with_columns(
        (pl.col("positional_share") >= thresholds.positional_share).alias("positional"),
        (pl.col("rare_share") >= thresholds.rare_share).alias("rare"),
        pl.struct("task", "state", "seed").map_elements(lambda r: probed_name(r["task"], r["state"], r["seed"]),
                                                        return_dtype=pl.String).alias("_probed"),
    )
    if syntactic is None or not syntactic.height:
        syntactic = pl.DataFrame(schema={"state": pl.String, "layer": pl.Int32, "head": pl.Int32, "best_relation": pl.String,
                                         "relation_margin": pl.Float64})
    frame = frame.join(syntactic.select(
        pl.col("state").alias("_probed"), pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32), "best_relation",
        "relation_margin"), on=["_probed", "layer", "head"], how="left").drop("_probed")
    syntactic_role = pl.col("relation_margin") >= thresholds.syntactic_margin
    frame = frame.with_columns(
        syntactic_role.alias("syntactic"),
        pl.when(syntactic_role).then(pl.col("best_relation")).alias("syntactic_relation"),
    ).drop("best_relation")
    # any role: true as soon as one is, null when none is and the syntactic one is unknown
    return frame.with_columns(
        pl.when(pl.col("positional") | pl.col("rare")).then(True).otherwise(pl.col("syntactic")).alias("specialised"),
        pl.concat_str(
            [pl.when(pl.col(role)).then(pl.lit(role)) for role in ROLES], separator="+", ignore_nulls=True
        ).replace("", "none").fill_null("none").alias("roles"),
    )


VOITA_RELATIONS = ("nsubj", "obj", "amod", "advmod")  # section 5.2's four, in UD (obj for dobj)


def best_relation_margins(per_head: pl.DataFrame, best: pl.DataFrame, relations: Iterable[str] = VOITA_RELATIONS) -> pl.DataFrame:
    """Per (state, layer, head), of ``relations``, the dependency relation where the head's accuracy beats that
    relation's best offset baseline by most (over both directions): ``state, layer, head, best_relation,
    relation_margin``. ``per_head`` and ``best`` are the syntactic-head stage's tables (every head's accuracy per
    relation; the relations it scores, with their baseline accuracy)."""
    scored = per_head.filter(pl.col("relation").is_in(list(relations))).join(
        best.select("state", "relation", "baseline_accuracy"), on=["state", "relation"], how="inner"
    ).with_columns((pl.col("accuracy") - pl.col("baseline_accuracy")).alias("relation_margin"))
    top = scored.sort("relation_margin", descending=True).group_by(["state", "layer", "head"], maintain_order=True).first()
    return top.select("state", pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32),
                      pl.col("relation").alias("best_relation"), "relation_margin")


MEASURES = ("confidence", "positional_share", "rare_share", "specialised")
# a role held by fewer heads (or by all but fewer) gives no rank correlation worth reading
MIN_ROLE_HEADS = 5
IMPORTANCE = "Michel importance"  # E|dL/dxi| on train, as Michel et al.'s eq. 2, not normalised by layer
NORMALIZED_IMPORTANCE = "Michel importance, layer-normalised"  # the order their pruning curve uses


def importance_targets(importance: dict[tuple[str, int], pl.DataFrame], deltas: list[pl.DataFrame]) -> pl.DataFrame:
    """The per-head quantities roles are compared with, one row per (task, seed, target, layer, head): Michel et
    al.'s importance (``importance``: (task, seed) -> the pruning stage's importance table), raw and layer-normalised,
    and the score drop when the head alone is disabled (``deltas``: the disabling stage's per-task tables; the drop is
    minus their delta, per seed and mode)."""
    frames = []
    for (task, seed), table in importance.items():
        heads = table.filter(pl.col("element") == "head")
        for target, column in ((IMPORTANCE, "importance"), (NORMALIZED_IMPORTANCE, "normalized")):
            frames.append(heads.select(pl.lit(task).alias("task"), pl.lit(seed, pl.Int64).alias("seed"), pl.lit(target).alias("target"),
                                       pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32), pl.col(column).alias("value")))
    for table in deltas:
        heads = table.filter((pl.col("kind") == "head") & pl.col("seed").is_not_null() & (pl.col("state") == states.FINETUNED))
        frames.append(heads.select("task", pl.col("seed").cast(pl.Int64), pl.format("score drop when disabled ({})", "mode").alias("target"),
                                   pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32), (-pl.col("delta")).alias("value")))
    schema = {"task": pl.String, "seed": pl.Int64, "target": pl.String, "layer": pl.Int32, "head": pl.Int32, "value": pl.Float64}
    return pl.concat([f.cast(schema) for f in frames]) if frames else pl.DataFrame(schema=schema)


def rank_correlations(roles: pl.DataFrame, targets: pl.DataFrame, resamples: int, level: float, seed: int) -> pl.DataFrame:
    """Voita et al.'s claim that the important heads are the confident, specialised ones, per fine-tuned model: the
    Spearman correlation over heads between each role measure of its dump (:data:`MEASURES`) and each ``target``
    (:func:`importance_targets`), with a percentile interval from ``resamples`` bootstrap draws of the heads (pairs
    resampled together; the model and its data held fixed). No correlation (NaN) for ``specialised`` when it is
    unknown for some head or fewer than :data:`MIN_ROLE_HEADS` heads are on either side, and no interval when more
    than 1% of the draws leave a measure constant. One row per task, seed, measure and target."""
    from bertology_core.bootstrap import metric_on_resamples, percentile_interval, resample_indices

    tuned = roles.filter(pl.col("state") == states.FINETUNED).with_columns(pl.col("specialised").cast(pl.Float64))
    joined = tuned.join(targets, on=["task", "seed", "layer", "head"], how="inner")
    rows = []
    for (task, run_seed, target), frame in sorted(joined.group_by("task", "seed", "target"), key=lambda kv: kv[0]):
        draws = resample_indices(frame.height, resamples, seed)
        y = frame["value"].to_numpy()
        for measure in MEASURES:
            x = frame[measure].to_numpy().astype(float)
            rho, low, high = np.nan, np.nan, np.nan
            held = np.nansum(x) if measure == "specialised" else None
            usable = not np.isnan(x).any() and (held is None or MIN_ROLE_HEADS <= held <= len(x) - MIN_ROLE_HEADS)
            if usable:
                rho = float(metric_on_resamples("spearman", x[None, :], y, np.arange(len(y))[None, :])[0, 0])
                resampled = metric_on_resamples("spearman", x[None, :], y, draws)[0]
                # a resample where a measure is constant has no correlation: an interval over the others would be
                # conditioned on drawing both kinds of heads
                if np.isfinite(resampled).mean() >= 0.99:
                    low, high = (float(v) for v in percentile_interval(resampled, level))
            rows.append({"task": task, "seed": run_seed, "measure": measure, "target": target, "heads": frame.height,
                         "spearman": rho, "ci_low": low, "ci_high": high})
    schema = {"task": pl.String, "seed": pl.Int64, "measure": pl.String, "target": pl.String, "heads": pl.Int64,
              "spearman": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def role_label(row: dict) -> str:
    """A head's roles in a map cell: P-1 (positional, offset -1), R (rare tokens), S (syntactic)."""
    marks = []
    if row["positional"]:
        marks.append(f"P{row['positional_offset']:+d}")
    if row["rare"]:
        marks.append("R")
    if row["syntactic"]:
        marks.append("S")
    return " ".join(marks)


def roles_chart(roles: pl.DataFrame, title: str, caption: str):
    """Per task (rows) and model state (columns), the layer x head map of confidence with each head's roles written
    in its cell (P-1/P+1 positional, R rare tokens, S syntactic); the tooltip gives every measure."""
    import altair as alt  # (imported here: altair is slow to import, and only the chart needs it)

    data = roles.with_columns(
        (pl.col("layer") + 1).alias("Layer"), (pl.col("head") + 1).alias("Head"),
        pl.struct("positional", "positional_offset", "rare", "syntactic").map_elements(role_label, return_dtype=pl.String).alias("role"),
        pl.format("{}{}", pl.col("state").replace_strict({s: states.label(s) for s in states.STATES}),
                  pl.when(pl.col("seed").is_null()).then(pl.lit("")).otherwise(pl.format(" seed {}", pl.col("seed")))).alias("model state"),
    )
    columns = data.sort(pl.col("seed").fill_null(-1))["model state"].unique(maintain_order=True).to_list()  # pre-trained first
    data = data.to_pandas()
    layers, heads = int(roles["layer"].max()) + 1, int(roles["head"].max()) + 1
    cell = 22
    base = alt.Chart().encode(x=alt.X("Head:O"), y=alt.Y("Layer:O"))
    tooltip = ["task", "model state", "Layer", "Head", "roles", alt.Tooltip("confidence:Q", format=".3f"),
               "positional_offset", alt.Tooltip("positional_share:Q", format=".2f"), alt.Tooltip("rare_share:Q", format=".2f"),
               "syntactic_relation", alt.Tooltip("relation_margin:Q", format="+.3f")]
    rects = base.mark_rect().encode(color=alt.Color("confidence:Q", scale=alt.Scale(scheme="viridis", domain=[0, 1])), tooltip=tooltip)
    text = base.mark_text(fontSize=8, color="white").encode(text="role:N")
    chart = alt.layer(rects, text, data=data).properties(width=cell * heads, height=cell * layers).facet(
        row=alt.Row("task:N", title=None), column=alt.Column("model state:N", title=None, sort=columns))
    return chart.properties(title=alt.TitleParams(title, subtitle=caption.split("\n"), anchor="start"))


def correlation_chart(relations: pl.DataFrame, title: str, caption: str):
    """Per fine-tuned model (panel), each measure's Spearman correlation with each target: point and interval."""
    import altair as alt

    data = relations.with_columns(pl.format("{} seed {}", "task", "seed").alias("model")).to_pandas()
    base = alt.Chart().encode(
        y=alt.Y("measure:N", title=None, sort=list(MEASURES)), yOffset=alt.YOffset("target:N"),
        color=alt.Color("target:N", title=None, legend=alt.Legend(orient="bottom", direction="vertical")))
    bars = base.mark_rule().encode(x=alt.X("ci_low:Q", title="Spearman correlation over heads", scale=alt.Scale(domain=[-1, 1])),
                                   x2="ci_high:Q")
    points = base.mark_point(filled=True, size=50).encode(
        x="spearman:Q", tooltip=["model", "measure", "target", "heads", alt.Tooltip("spearman:Q", format="+.3f"),
                                 alt.Tooltip("ci_low:Q", format="+.3f"), alt.Tooltip("ci_high:Q", format="+.3f")])
    zero = alt.Chart().mark_rule(strokeDash=[4, 4], color="gray").encode(x=alt.datum(0))
    chart = alt.layer(bars, points, zero, data=data).properties(width=260, height=140).facet(
        facet=alt.Facet("model:N", title=None), columns=2)
    return chart.properties(title=alt.TitleParams(title, subtitle=caption.split("\n"), anchor="start"))
