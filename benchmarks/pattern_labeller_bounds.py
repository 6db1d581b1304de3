"""What bounds the pattern labellers on a set of hand labels: simpler models on the same per-map features, a
learning curve, and the stripe-on-[CLS] check that led to the second labelling (data/pattern_labels/README.md).

Reads the maps of the labelled examples the workflow computed (``results/patterns/<model>/labelled``) and
prints, for the labels given:

- macro F1 (the four classes with labels) of a logistic regression and of decision trees (depth 2-5) on
  the features of ``feature_tables.FEATURES``, under stratified
  5-fold cross-validation repeated over 4 seeds, on all labels and on the randomly drawn ones;
- the logistic regression trained on 40-100% of each training fold (does more of the same labels help?);
- the rule labeller fitted (from a neutral start) on 70% and scored on the held-out 30%, for 5 seeded splits,
  and decision trees fitted and scored on the same splits;
- with ``--cnn``, the pattern CNN as the workflow configures it (``config.yaml``: image size, epochs, ensemble)
  under the same 5-fold cross-validation the workflow reports (slow: minutes);
- among maps with little diagonal structure (``band_excess < 0.1``), the share labelled vertical by the
  stripe excess and by where the most attended column is ([CLS], another special token, a word).

Decision trees split one feature at a time; the rule labeller thresholds a ratio of two features, which a
shallow tree cannot express: the trees are a comparison, not a bound on threshold rules.

    python benchmarks/pattern_labeller_bounds.py --labels data/pattern_labels/minilm-l6.csv \\
        --labelled results/patterns/minilm-l6/labelled
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertology_core.patterns import feature_tables, label_tables, training  # noqa: E402
from bertology_core.attention.dump_tables import AttentionDump  # noqa: E402

CLASSES = ["vertical", "diagonal", "vertical_diagonal", "heterogeneous"]


def scores(make, X, y, random, seeds=4, fraction=1.0):
    out = []
    for seed in range(seeds):
        predicted = np.empty_like(y)
        rng = np.random.default_rng(seed)
        for train, test in StratifiedKFold(5, shuffle=True, random_state=seed).split(X, y):
            train = rng.choice(train, int(len(train) * fraction), replace=False) if fraction < 1 else train
            predicted[test] = make().fit(X[train], y[train]).predict(X[test])
        out.append((f1_score(y, predicted, labels=CLASSES, average="macro"),
                    f1_score(y[random], predicted[random], labels=CLASSES, average="macro")))
    return np.round(np.mean(out, axis=0), 3)


def top_column_kind(labels: pl.DataFrame, labelled: Path) -> list[str]:
    kinds, dumps = [], {}
    for row in labels.iter_rows(named=True):
        key = f"{row['task']}/{row['state']}"
        dump = dumps.setdefault(key, AttentionDump(labelled / key))
        tokens = dump.tokens().filter(pl.col("idx") == row["idx"])
        column = int(np.argmax(dump.map(tokens["example"][0], row["layer"], row["head"]).mean(axis=0)))
        special = feature_tables.special_masks(tokens["segment_ids"][0].to_list())[0]
        kinds.append("[CLS]" if column == 0 else "other special" if special[column] else "word")
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=Path, required=True)
    parser.add_argument("--labelled", type=Path, required=True, help="results/patterns/<model>/labelled")
    parser.add_argument("--cnn", action="store_true", help="also cross-validate the pattern CNN (minutes)")
    args = parser.parse_args()
    labels = label_tables.read_labels(args.labels)
    keys = sorted(set(labels.select(pl.concat_str("task", pl.lit("/"), "state")).to_series()))
    _, frame = training.labelled_maps(labels, {k: str(args.labelled / k) for k in keys}, 8, feature_tables.RuleThresholds())
    X, y = feature_tables.feature_matrix(frame), frame["label"].to_numpy()
    random = (frame["sample"] == "random").fill_null(False).to_numpy()
    print(f"{len(y)} labels ({random.sum()} random); macro F1 over {CLASSES}: all labels, random ones (5-fold CV, 4 seeds)")
    logistic = lambda: make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=5000))  # noqa: E731
    print("logistic regression on the features:", scores(logistic, X, y, random))
    for depth in (2, 3, 4, 5):
        tree = lambda: DecisionTreeClassifier(max_depth=depth, min_samples_leaf=5, random_state=0)  # noqa: E731
        print(f"decision tree, depth {depth}:", scores(tree, X, y, random))
    for fraction in (0.4, 0.6, 0.8, 1.0):
        print(f"logistic regression on {fraction:.0%} of each training fold:", scores(logistic, X, y, random, fraction=fraction))
    repeated = training.repeated_rule_validation(frame, y, 0.3, list(range(5)), CLASSES)
    print("rule labeller, held out on 5 seeded 70/30 splits:", np.round(repeated["macro_f1_frequent_classes"], 3),
          f"mean {repeated['mean']:.3f} +/- {repeated['std']:.3f}")
    for depth in (2, 5):
        held = []
        for seed in range(5):
            split = label_tables.validation_split(y, 0.3, seed)
            tree = DecisionTreeClassifier(max_depth=depth, min_samples_leaf=5, random_state=0).fit(X[split == "fit"], y[split == "fit"])
            held.append(f1_score(y[split == "held_out"], tree.predict(X[split == "held_out"]), labels=CLASSES, average="macro"))
        print(f"decision tree depth {depth}, held out on the same splits:", np.round(held, 3), f"mean {np.mean(held):.3f}")
    if args.cnn:
        import yaml

        from bertology_core.patterns.cnn import PatternCNN, cross_validated_f1, pack

        settings = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())["patterns"]
        maps, _ = training.labelled_maps(labels, {k: str(args.labelled / k) for k in keys}, settings["image_size"], feature_tables.RuleThresholds())
        model = PatternCNN(image_size=settings["image_size"], epochs=settings["epochs"], seed=settings["seed"], ensemble=settings["ensemble"])
        cv = cross_validated_f1(model, pack(maps, X), y, folds=settings["cv_folds"], seed=settings["seed"])
        predicted = cv["out_of_fold_predictions"]
        print(f"CNN ({settings['ensemble']} seeds), {cv['folds']}-fold CV:",
              round(f1_score(y, predicted, labels=CLASSES, average="macro"), 3),
              round(f1_score(y[random], predicted[random], labels=CLASSES, average="macro"), 3))
    table = pl.DataFrame({"label": y, "stripe_excess": frame["stripe_excess"], "band_excess": frame["band_excess"],
                          "top_column": top_column_kind(labels, args.labelled)})
    table = table.filter(pl.col("band_excess") < 0.1).with_columns(
        pl.col("stripe_excess").cut([0.3, 0.45, 0.6]).cast(pl.String).alias("stripe_excess"))
    summary = table.group_by("stripe_excess", "top_column").agg(
        pl.len().alias("maps"), (pl.col("label") == "vertical").sum().alias("labelled_vertical")).sort("stripe_excess", "top_column")
    with pl.Config(tbl_rows=30):
        print("maps with band_excess < 0.1, by stripe excess and where the most attended column is:")
        print(summary)


if __name__ == "__main__":
    main()
