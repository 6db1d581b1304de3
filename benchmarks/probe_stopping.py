"""Probes before and after early stopping, on one probed state of a finished run: the probe of an earlier commit
(a fixed number of epochs; ``git show <commit>:bertology_core/probing.py``, the path before the library's packages)
refitted on the run's features, labels
and control labels, beside the run's own early-stopped probes and their converged reference (``probes.parquet``).

    python benchmarks/probe_stopping.py --results results --model minilm-l6 --state pretrained \\
        --old-commit 3d0c42a --old-epochs 10 --config configs/cpu.yaml

Prints one row per label set and layer: accuracy, control accuracy and selectivity before and after, the epochs
the early-stopped probes kept, and the reference's accuracy and selectivity.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import polars as pl
import torch
import yaml
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bertology_core.data import io, tasks  # noqa: E402
from bertology_core.models import loading
from bertology_core.probing import probes


# where the modules an earlier commit's flat library imported from live now
FLAT_MODULES = {"bertology_core.batching": "bertology_core.inputs.batching", "bertology_core.treebank": "bertology_core.data.treebank",
                "bertology_core.word_pieces": "bertology_core.data.word_pieces", "bertology_core.bootstrap": "bertology_core.stats.bootstrap"}


def old_probing(commit: str) -> types.ModuleType:
    """``probing.py`` as it was at ``commit`` (flat layout: bertology_core/probing.py), its imports of the flat library
    answered by today's modules."""
    path = "bertology_core/probing.py"
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path}"], check=True, capture_output=True, text=True).stdout
    for flat, now in FLAT_MODULES.items():
        sys.modules.setdefault(flat, importlib.import_module(now))
    module = types.ModuleType("old_probing")
    sys.modules["old_probing"] = module  # dataclasses look their module up
    exec(compile(source, f"{commit}:{path}", "exec"), module.__dict__)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--old-commit", required=True)
    parser.add_argument("--old-epochs", type=int, required=True)
    parser.add_argument("--config", type=Path, help="the run's config layered over config.yaml (its probing samples)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = yaml.safe_load((ROOT / "config.yaml").read_text())["probing"]
    if args.config:
        config |= yaml.safe_load(args.config.read_text()).get("probing", {})
    frames = {split: tasks.subsample(pl.read_parquet(args.results / f"treebank/{split}.parquet"), config[f"{split}_sentences"],
                                    config["sample_seed"], order="sentence") for split in ("train", "dev")}
    tensors = load_file(str(args.results / f"probing/{args.model}/{args.state}/features.safetensors"))
    tokenizer = loading.load_tokenizer(io.read_json(args.results / f"models/{args.model}/resolved.json")["path"])
    lowercase = tokenizer.tokenize("The") == tokenizer.tokenize("the")
    after = pl.read_parquet(args.results / f"probing/{args.model}/{args.state}/probes.parquet")
    old = old_probing(args.old_commit)
    settings = probes.ProbeSettings(**config["probe"])

    def fixed_epochs(train, labels, classes, _settings, _sentences):
        weight, bias, (mean, std) = old.fit_layer_probes(train, labels, classes, old.ProbeSettings(
            epochs=args.old_epochs, batch_size=settings.batch_size, learning_rate=settings.learning_rate,
            weight_decay=settings.weight_decay, seed=settings.seed))
        layers = len(weight)
        return probes.LayerProbes(weight, bias, mean, std, np.full(layers, args.old_epochs), args.old_epochs, np.zeros(layers))

    probes.fit_layer_probes = fixed_epochs  # probe_label_sets looks it up at call time
    before, _ = probes.probe_label_sets(frames, tensors, config["labels"], settings, config["min_label_count"],
                                         config["control_seed"], lowercase=lowercase)
    table = after.select("labels", "layer", "accuracy", "control_accuracy", "selectivity", "epoch", "control_epoch",
                         "reference_accuracy", "reference_selectivity").join(
        before.select("labels", "layer", *[pl.col(c).alias(f"{c}_before") for c in ("accuracy", "control_accuracy", "selectivity")]),
        on=["labels", "layer"])
    with pl.Config(tbl_rows=60, tbl_cols=20, float_precision=3):
        print(table)


if __name__ == "__main__":
    main()
