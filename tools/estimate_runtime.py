"""An estimate (not a measurement) of what the default config (config.yaml: bert-base-uncased, seven GLUE tasks)
costs, from the CPU profile's measured per-job CPU times (BENCHMARKS.md, all-MiniLM-L6-v2, one thread per job).

Each model-running job is priced as (examples it pushes through the model) x (measured CPU seconds per example of
that task on all-MiniLM-L6-v2) x (bert-base's compute per token over all-MiniLM-L6-v2's), then divided by an
assumed GPU speed-up over one CPU thread. Only the jobs that dominate are priced: training (fine-tuning, the
from-scratch baseline, the re-fine-tuned lottery subnetworks, the L0 head gates) and forward passes over dev (disabling sweeps, pruning
searches, dumps, outlier-dimension disablings); the rest (tables, figures, features, the probes) cost about 1,800 CPU seconds in the whole CPU profile.

    python tools/estimate_runtime.py            # the table in README.md, "On a GPU workstation"
"""

from __future__ import annotations

# GLUE split sizes (examples): train, dev (MNLI: dev_matched; dev_mismatched is evaluated too)
SIZES = {"MRPC": (3668, 408), "STS-B": (5749, 1500), "SST-2": (67349, 872), "QQP": (363846, 40430),
         "RTE": (2490, 277), "QNLI": (104743, 5463), "MNLI": (392702, 9815 + 9832)}

# CPU seconds per training example and epoch, all-MiniLM-L6-v2 (BENCHMARKS.md, "CPU profile: wall time per job":
# finetune/<task>/pretrained/seed1 CPU s / (train examples x 3 epochs), measured before the state names of
# bertology_core/data/states.py: that run is now finetune/<task>/finetuned/seed1; SST-2 trained on 8,000 sentences)
TRAIN = {"MRPC": 647 / (3668 * 3), "RTE": 549 / (2490 * 3), "STS-B": 567 / (5749 * 3), "SST-2": 392 / (8000 * 3)}
# CPU seconds per forward example, all-MiniLM-L6-v2: disabling_sweep/<task> CPU s / (79 configurations x examples)
FORWARD = {"MRPC": 213 / (79 * 300), "RTE": 238 / (79 * 277), "STS-B": 72 / (79 * 200), "SST-2": 126 / (79 * 400)}
# tasks the CPU profile does not run: the mean of the measured ones (their inputs are of similar length)
for table in (TRAIN, FORWARD):
    mean = sum(table.values()) / len(table)
    for task in SIZES:
        table.setdefault(task, mean)

# bert-base (12 layers, hidden 768) over all-MiniLM-L6-v2 (6 layers, hidden 384): 2 x the layers, 4 x the matrix sizes
MODEL_FACTOR = 2 * 4
LAYERS, HEADS = 12, 12
EPOCHS = 3
# the default config: the from-scratch baseline trains like the model; pruning re-fine-tunes good, random and bad
# subnetworks of m- and s-pruning under both protocols (2 x 3 x 2); disabling sweeps every head, every layer, intact
TRAININGS = 1 + 1 + 2 * 3 * 2
# Voita et al.'s L0 head gates (head_roles.gates): 4 strengths, one epoch each, with the weights trained and frozen (a
# frozen run back-propagates through the model all the same: priced as a training epoch)
GATE_EPOCHS = 4 * 1 * 2
SWEEP_CONFIGS = LAYERS * HEADS + LAYERS + 1
# forward passes over dev per task besides the sweep, in passes over all of dev
GREEDY_STEPS = 5


def dev_passes(dev: int) -> float:
    evaluations = 2 + 12  # pre-trained and fine-tuned model; the 12 re-fine-tuned subnetworks
    michel = 10 + 1  # Michel et al.'s curve: 10% of the heads per step
    m_pruning = 2 * 11 * 0.5  # <= 11 iterations on half of dev, under 2 protocols
    s_pruning = 2 * 30 * 0.5  # about 30 iterations (heads, then heads at half the share, then MLPs) on half of dev
    greedy = (GREEDY_STEPS - 1) * LAYERS * HEADS * 0.5  # each step after the first tries every head, on half of dev
    gates = 2 * 4 * 4  # 2 x 4 gate jobs each score dev with the gates, at gate 1, Michel et al.'s order and the full model
    # BERT Busters: intact + 3 placements x (outliers + 100 random draws), full passes, on at most 2,000 dev examples
    outliers = (1 + 3 * (1 + 100)) * min(dev, 2000) / dev
    importance = 2 * 30 * 3 * 512 / dev  # s-pruning recomputes importance on 512 train examples (forward + backward)
    dumps = 2 * 4 * min(dev, 1000) / dev  # 2 states, at most 1000 examples, writing costs ~3 forwards (BENCHMARKS)
    return (evaluations + michel + m_pruning + s_pruning + greedy + importance + dumps + gates + outliers) * dev


# assumed (no GPU here to measure): one workstation GPU (RTX 3090/4090, A5000 class, fp32) trains and runs bert-base
# about this many times faster than one thread of the CPU measured in BENCHMARKS.md
GPU_SPEEDUPS = (50, 100, 200)


def main() -> None:
    rows, total = [], 0.0
    for task, (train, dev) in SIZES.items():
        training = (TRAININGS * EPOCHS + GATE_EPOCHS) * train * TRAIN[task] * MODEL_FACTOR
        sweep = SWEEP_CONFIGS * dev * FORWARD[task] * MODEL_FACTOR
        passes = dev_passes(dev) * FORWARD[task] * MODEL_FACTOR
        rows.append((task, training, sweep, passes))
        total += training + sweep + passes
    print("| task | training (CPU h) | disabling sweep (CPU h) | other dev passes (CPU h) |")
    print("|---|---|---|---|")
    for task, training, sweep, passes in rows:
        print(f"| {task} | {training / 3600:,.0f} | {sweep / 3600:,.0f} | {passes / 3600:,.0f} |")
    print(f"| **all** | {sum(r[1] for r in rows) / 3600:,.0f} | {sum(r[2] for r in rows) / 3600:,.0f} | "
          f"{sum(r[3] for r in rows) / 3600:,.0f} |")
    print(f"\nEstimated total: {total / 3600:,.0f} CPU-thread hours; on one GPU "
          + ", ".join(f"{total / 3600 / s:,.0f} h at {s}x" for s in GPU_SPEEDUPS) + ".")


if __name__ == "__main__":
    main()
