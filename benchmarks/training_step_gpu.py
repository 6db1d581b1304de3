"""Milliseconds per training step of the fine-tuning loop on one CUDA GPU, under each precision policy, with and
without the deterministic mode every job runs in (device.model_job), for a model geometry with random weights (a
step's speed does not depend on the weights, so this runs where no trained weights are).

The loop is the workflow's own (:func:`bertology_core.finetune.training.train`: length-grouped batches of 32 MRPC
training pairs cut at 128 word pieces, AdamW, clipping, the last layer on [CLS] alone), one epoch over ``--examples``
pairs after a warm-up run of 64, the device synchronised around the timed run. Geometries: a folder's ``config.json``
(with its tokenizer) and BERT-base's (transformers' BertConfig defaults; same WordPiece vocabulary).

    python benchmarks/training_step_gpu.py --model-folder FOLDER [--glue DIR] [--examples 2048] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-folder", required=True, help="a model folder's config.json and tokenizer")
    parser.add_argument("--glue", default=str(ROOT.parent / "shared" / "data" / "glue"), help="GLUE in the classic layout")
    parser.add_argument("--examples", type=int, default=2048)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: a quick test of the script
    parser.add_argument("--out", help="write the rows as JSON here too")
    args = parser.parse_args()
    # as device.job_device does before CUDA starts: deterministic cuBLAS needs its fixed workspace (set for both modes)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

    import torch
    from transformers import AutoConfig, BertConfig

    from bertology_core.cost.calibration import random_classifier, synchronize
    from bertology_core.data import tasks
    from bertology_core.finetune import training
    from bertology_core.inputs import batching

    from bertology_core.models import loading, precision
    device = torch.device(args.device)
    task = tasks.glue_task("MRPC", args.glue)
    train = tasks.read_split(task, "train", task.files).head(args.examples)
    tokenizer = loading.load_tokenizer(args.model_folder)
    encoded, warm = batching.encode(train, tokenizer, 128), batching.encode(train.head(64), tokenizer, 128)
    labels = train["label"].to_numpy()
    config = training.FinetuneConfig(epochs=1, group_by_length=True)
    geometries = {Path(args.model_folder).name: AutoConfig.from_pretrained(args.model_folder), "bert-base": BertConfig()}
    rows = []
    for deterministic in (False, True):
        torch.use_deterministic_algorithms(deterministic)
        for geometry, model_config in geometries.items():
            for policy in ("float32", "mixed"):
                resolved = precision.resolve(policy, device)
                model = random_classifier(model_config, device, engine=False)
                training.train(model, task, warm, labels[:64], config, 1, progress=False, precision=resolved)
                model = random_classifier(model_config, device, engine=False)
                synchronize(device)
                started = time.perf_counter()
                record = training.train(model, task, encoded, labels, config, 1, progress=False, precision=resolved)
                synchronize(device)
                seconds = time.perf_counter() - started
                rows.append({"geometry": geometry, "policy": policy, "training": resolved.training,
                             "deterministic": deterministic, "steps": record["steps"],
                             "ms_per_step": round(1000 * seconds / record["steps"], 2)})
                print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                                              "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
