"""Make hand labels of attention patterns: draw the sample, render blind sheets, draw the second pass, score it.

    python tools/label_patterns.py sample --attention results/attention/<model> --out labels/sample.csv
    python tools/label_patterns.py sheets --keys labels/sample.csv --attention results/attention/<model> --out labels/sheets
    python tools/label_patterns.py second-pass --labels labels/<model>.csv --share 0.2 --out labels/second.keys.csv
    python tools/label_patterns.py agreement --labels labels/<model>.csv --second labels/<model>.second_pass.csv
    python tools/label_patterns.py test-sample --attention results/attention/<model> --exclude labels/<model>.csv \
        --per-dump 40 --recheck-from labels/<model>.csv --recheck 100 --out labels/test.keys.csv

The keys file lists the maps in a seeded blind order with their ``sheet`` and ``cell``; a labeller views
the sheets (PNG, 20 maps each, numbered) and writes one class per cell. The sheets show neither the task,
the model state nor which part of the sample a map comes from. See data/pattern_labels/README.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertology_core.patterns import feature_tables, label_tables
from bertology_core.attention.dump_tables import AttentionDump  # noqa: E402

PER_SHEET = 20


def dump_keys(attention_dir: Path) -> list[str]:
    """``<task>/<dumped state>`` of every dump under ``attention_dir`` (``MRPC/pretrained``, ``MRPC/finetuned/seed1``)."""
    return sorted(str(p.relative_to(attention_dir)).removesuffix(".attention.parquet")
                  for p in attention_dir.rglob("*.attention.parquet"))


def with_sheets(keys: pl.DataFrame) -> pl.DataFrame:
    position = np.arange(keys.height)
    return keys.with_columns(pl.Series("sheet", position // PER_SHEET + 1), pl.Series("cell", position % PER_SHEET + 1))


def sample(args: argparse.Namespace) -> None:
    features = {key: feature_tables.dump_features(AttentionDump(args.attention / key)) for key in dump_keys(args.attention)}
    keys = label_tables.draw_sample(features, args.random_per_dump, args.enriched_per_class, args.seed)
    with_sheets(label_tables.blind_order(keys, args.seed)).write_csv(args.out)
    print(f"{keys.height} maps from {len(features)} dumps -> {args.out}")


def sheets(args: argparse.Namespace) -> None:
    """Render the keys' maps, found by GLUE idx in the first of the ``--attention`` folders whose dump holds it
    (e.g. the analysis dumps, then the labelled maps of ``results/patterns/<model>/labelled``)."""
    keys = pl.read_csv(args.keys)
    args.out.mkdir(parents=True, exist_ok=True)
    names = {f"{t}/{s}" for t, s in keys.select("task", "state").iter_rows()}
    dumps = {(folder, key): AttentionDump(folder / key) for folder in args.attention for key in names
             if (folder / f"{key}.attention.parquet").is_file()}
    tokens = {where: dump.tokens().select("example", "idx", "segment_ids") for where, dump in dumps.items()}
    for (sheet,), group in keys.group_by("sheet", maintain_order=True):
        maps, specials = [], []
        for row in group.sort("cell").iter_rows(named=True):
            key = f"{row['task']}/{row['state']}"
            found = [(where, tokens[where].filter(pl.col("idx") == row["idx"])) for where in dumps if where[1] == key]
            found = [(where, example) for where, example in found if example.height == 1]
            if not found:
                raise SystemExit(f"{key}: idx {row['idx']} is in no dump under {[str(a) for a in args.attention]}")
            where, example = found[0]
            maps.append(dumps[where].map(example["example"][0], row["layer"], row["head"]))
            specials.append(feature_tables.special_masks(example["segment_ids"][0].to_list())[0])
        (args.out / f"sheet{sheet:03d}.png").write_bytes(label_tables.label_sheet(maps, specials))
    print(f"{keys['sheet'].n_unique()} sheets -> {args.out}")


def test_sample(args: argparse.Namespace) -> None:
    """A test set for labellers designed on earlier labels: ``--per-dump`` maps drawn at random from each dump
    among the maps no labels file in ``--exclude`` names (``sample`` = ``test-random``), mixed in one blind order
    with ``--recheck`` maps drawn at random from ``--recheck-from`` (``sample`` = ``recheck``): relabelled by a new
    labeller who has not seen their labels, they measure agreement between labellers, and the sheets do not tell
    the two parts apart."""
    done = pl.concat([label_tables.read_labels(path).select(*label_tables.KEY) for path in args.exclude])
    features = {}
    for key in dump_keys(args.attention):
        task, state = key.split("/", 1)
        frame = feature_tables.dump_features(AttentionDump(args.attention / key)).with_columns(
            pl.lit(task).alias("task"), pl.lit(state).alias("state"), pl.col("idx").cast(pl.Int64),
            pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32))
        features[key] = frame.join(done, on=list(label_tables.KEY), how="anti")
    fresh = label_tables.draw_sample(features, args.per_dump, 0, args.seed).with_columns(pl.lit("test-random").alias("sample"))
    parts = [fresh]
    if args.recheck:
        earlier = label_tables.read_labels(args.recheck_from)
        take = np.sort(np.random.default_rng(args.seed).choice(earlier.height, size=min(args.recheck, earlier.height), replace=False))
        parts.append(earlier[take].select(*label_tables.KEY).with_columns(pl.lit("recheck").alias("sample")))
    keys = with_sheets(label_tables.blind_order(pl.concat(parts), args.seed))
    keys.with_columns(pl.col("sheet") + args.first_sheet - 1).write_csv(args.out)
    print(f"{fresh.height} new maps + {keys.height - fresh.height} to recheck, {keys['sheet'].n_unique()} sheets -> {args.out}")


def focus(args: argparse.Namespace) -> None:
    """More maps of a rare class for the labeller: ``--count`` maps drawn at random from the maps that satisfy
    ``--where`` (a SQL condition on the features, e.g. the rule labeller's class), mixed with ``--filler`` maps
    drawn at random from the same dumps, so the sheets do not tell the labeller which maps are candidates."""
    done = pl.concat([pl.read_csv(path).select(*label_tables.KEY) for path in args.exclude]) if args.exclude else \
        pl.DataFrame(schema={"task": pl.String, "state": pl.String, "idx": pl.Int64, "layer": pl.Int32, "head": pl.Int32})
    rng = np.random.default_rng(args.seed)
    pool = pl.concat([
        feature_tables.dump_features(AttentionDump(args.attention / key)).select(
            pl.lit(key.split("/")[0]).alias("task"), pl.lit(key.split("/", 1)[1]).alias("state"),
            pl.col("idx").cast(pl.Int64), pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32), *feature_tables.FEATURES)
        for key in dump_keys(args.attention) if key.split("/")[0] in args.tasks
    ]).join(done.with_columns(pl.col("idx").cast(pl.Int64), pl.col("layer").cast(pl.Int32), pl.col("head").cast(pl.Int32)),
            on=list(label_tables.KEY), how="anti")
    candidates = pool.filter(pl.sql_expr(args.where))
    take = rng.choice(candidates.height, size=min(args.count, candidates.height), replace=False)
    chosen = candidates[np.sort(take)].select(*label_tables.KEY).with_columns(pl.lit(args.name).alias("sample"))
    rest = pool.join(chosen, on=list(label_tables.KEY), how="anti")
    take = rng.choice(rest.height, size=min(args.filler, rest.height), replace=False)
    filler = rest[np.sort(take)].select(*label_tables.KEY).with_columns(pl.lit("random-filler").alias("sample"))
    keys = with_sheets(label_tables.blind_order(pl.concat([chosen, filler]), args.seed))
    keys.with_columns(pl.col("sheet") + args.first_sheet - 1).write_csv(args.out)
    print(f"{chosen.height} of {candidates.height} candidates + {filler.height} filler maps -> {args.out}")


def second_pass(args: argparse.Namespace) -> None:
    first = label_tables.read_labels(args.labels)
    rng = np.random.default_rng(args.seed)
    take = np.sort(rng.choice(first.height, size=int(round(args.share * first.height)), replace=False))
    keys = label_tables.blind_order(first[take].select(*label_tables.KEY), args.seed)
    with_sheets(keys).write_csv(args.out)
    print(f"{keys.height} maps for the blind second pass -> {args.out}")


def agreement(args: argparse.Namespace) -> None:
    print(label_tables.pass_agreement(label_tables.read_labels(args.labels), label_tables.read_labels(args.second)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(required=True)
    command = commands.add_parser("sample", help="draw the maps to label")
    command.add_argument("--attention", type=Path, required=True, help="results/attention/<model>")
    command.add_argument("--random-per-dump", type=int, default=30)
    command.add_argument("--enriched-per-class", type=int, default=40)
    command.add_argument("--seed", type=int, default=0)
    command.add_argument("--out", type=Path, required=True)
    command.set_defaults(run=sample)
    command = commands.add_parser("sheets", help="render the keys' maps as numbered PNG sheets")
    command.add_argument("--keys", type=Path, required=True)
    command.add_argument("--attention", type=Path, nargs="+", required=True, help="dump folders, searched in order")
    command.add_argument("--out", type=Path, required=True)
    command.set_defaults(run=sheets)
    command = commands.add_parser("focus", help="more maps of a rare class, mixed with random ones")
    command.add_argument("--attention", type=Path, required=True)
    command.add_argument("--tasks", nargs="+", required=True)
    command.add_argument("--where", required=True, help="SQL condition on the features")
    command.add_argument("--count", type=int, default=40)
    command.add_argument("--name", default="focus", help="the candidates' sample name (e.g. block-focus)")
    command.add_argument("--filler", type=int, default=20)
    command.add_argument("--exclude", type=Path, nargs="*", default=[], help="keys files already drawn")
    command.add_argument("--first-sheet", type=int, default=1)
    command.add_argument("--seed", type=int, default=2)
    command.add_argument("--out", type=Path, required=True)
    command.set_defaults(run=focus)
    command = commands.add_parser("test-sample", help="a random test set of unlabelled maps, mixed with maps to recheck")
    command.add_argument("--attention", type=Path, required=True)
    command.add_argument("--exclude", type=Path, nargs="+", required=True, help="labels files whose maps are not drawn")
    command.add_argument("--per-dump", type=int, default=40)
    command.add_argument("--recheck-from", type=Path, help="labels file to draw maps to relabel from")
    command.add_argument("--recheck", type=int, default=0)
    command.add_argument("--first-sheet", type=int, default=1)
    command.add_argument("--seed", type=int, default=20)
    command.add_argument("--out", type=Path, required=True)
    command.set_defaults(run=test_sample)
    command = commands.add_parser("second-pass", help="draw a random share of the labels for a blind second pass")
    command.add_argument("--labels", type=Path, required=True)
    command.add_argument("--share", type=float, default=0.2)
    command.add_argument("--seed", type=int, default=1)
    command.add_argument("--out", type=Path, required=True)
    command.set_defaults(run=second_pass)
    command = commands.add_parser("agreement", help="Cohen's kappa of the second pass with the first")
    command.add_argument("--labels", type=Path, required=True)
    command.add_argument("--second", type=Path, required=True)
    command.set_defaults(run=agreement)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
