"""What a job needs, memory, time and disk, from the sizes of what it reads: the requests a cluster that enforces its
limits gets, and the plan of a whole run before it starts.

A job's :class:`Sizes` are read from its input files as they are when it is about to run: the parameters of the model
it reads (its ``resolved.json``'s folder or a trained model's folder, counted from the safetensors headers; the
largest, where it reads several) and the megabytes on disk of everything else it reads (data, token files, attention
dumps, sweep tables, probe features). Each rule's memory (MB, peak resident), time (minutes) and disk (MB its outputs
hold) is a line in these sizes, with coefficients of at least zero, so that a need never shrinks as a job reads more:

- memory: ``base + a * parameters + b * read_mb``;
- minutes: ``base + c * read_mb + d * parameters * read_mb`` (every byte it reads, through the model);
- disk: the same terms as memory, one line per output (in the rule's order) where every measured job of the rule has
  the same outputs, else one line for the whole.

The coefficients are fitted (least squares, non-negative: scipy's ``nnls``) on finished runs' jobs, each job's own
record of its peak memory and seconds (:mod:`bertology_core.workflow.job_record`), the sizes of its inputs and the
bytes of its outputs (``tools/fit_needs.py``, which writes ``needs.yaml`` beside this module and says which runs it
read). A request is the line times a margin (:data:`MARGIN`; raised for a rule where a fitted job was above its line
times the margin, so that every job the fit saw is inside its request), at least :data:`LEAST`, times the attempt
(a retried job asks for more). ``compute.mem_mb[rule]`` overrides a rule's memory. Until its inputs exist a request is
unknown (Snakemake shows ``<TBD>`` in a dry run and asks again before it schedules the job); :func:`plan` predicts
them for a whole run by carrying each job's predicted outputs to the jobs that read them.

Torch-free.
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bertology_core.models import compatibility

NEEDS_FILE = Path(__file__).with_name("needs.yaml")
KINDS = ("memory_mb", "minutes", "disk_mb")
# the terms of each kind's line
TERMS = {"memory_mb": ("base", "parameters", "read_mb"), "minutes": ("base", "read_mb", "parameters x read_mb"),
         "disk_mb": ("base", "parameters", "read_mb")}
# Whose memory does not grow with what it reads, so its memory line has no term in it (a slope fitted over a few
# tasks' files would only extrapolate their noise to a task a hundred times larger): every job that reads a model,
# which takes its data a batch at a time, except the probes, which hold every layer's word features whole; and the
# rules that read a file a chunk at a time (the token writer, the dump readers, the pattern CNN).
MEMORY_HOLDS_WHAT_IT_READS = frozenset({"probe_layers", "layer_mix"})
MEMORY_STREAMS = frozenset({"tokenize_data", "pattern_features", "classify_maps", "head_roles", "linguistic_scores",
                            "attention_change", "pattern_classifier"})


def memory_reads(rule: str, reads_a_model: bool) -> bool:
    """Whether ``rule``'s memory line has a term in the megabytes its jobs read."""
    return rule in MEMORY_HOLDS_WHAT_IT_READS or not (reads_a_model or rule in MEMORY_STREAMS)


# what a request adds to the fitted line: a job's peak moves with the machine and the data's lengths, its time more
# (another CPU, a busy node, a filesystem), its outputs hardly
MARGIN = {"memory_mb": 1.3, "minutes": 2.0, "disk_mb": 1.2}
# the least a job asks for (an interpreter with polars or torch loaded; a cluster's shortest useful slot)
LEAST = {"memory_mb": 500, "minutes": 5, "disk_mb": 0}
# the checkpoint a training job keeps while it runs: weights, AdamW's two moments and the gradients' scale in float32
# (bertology_core.finetune.training), 4 bytes each
CHECKPOINT_BYTES_PER_PARAMETER = 12
TRAINING_RULES = ("finetune", "head_gates", "subnetwork_finetune")


@dataclass(frozen=True)
class Sizes:
    """What a job reads: ``parameters`` (millions) of the largest model, ``read_mb`` (MB on disk) of the rest."""

    parameters: float = 0.0
    read_mb: float = 0.0

    def term(self, name: str) -> float:
        return {"base": 1.0, "parameters": self.parameters, "read_mb": self.read_mb,
                "parameters x read_mb": self.parameters * self.read_mb}[name]


@dataclass(frozen=True)
class Line:
    """A fitted line: a coefficient per term (:data:`TERMS`), and the margin a request multiplies it by."""

    coefficients: Mapping[str, float]
    margin: float = 1.0

    def at(self, sizes: Sizes) -> float:
        return sum(value * sizes.term(term) for term, value in self.coefficients.items())


@dataclass(frozen=True)
class Need:
    """A rule's lines (:data:`KINDS`; ``disk_mb``: one line per output, or one for all), and what they were fitted on."""

    rule: str
    memory_mb: Line
    minutes: Line
    disk_mb: tuple[Line, ...]
    fitted: str = ""

    def predict(self, kind: str, sizes: Sizes, outputs: int = 1) -> float:
        """The fitted value (no margin) of ``kind`` for a job of ``sizes`` (``outputs``: how many it writes)."""
        if kind != "disk_mb":
            return getattr(self, kind).at(sizes)
        if len(self.disk_mb) == outputs or len(self.disk_mb) == 1:
            return sum(line.at(sizes) for line in self.disk_mb)
        return sum(line.at(sizes) for line in self.disk_mb) / len(self.disk_mb) * outputs

    def request(self, kind: str, sizes: Sizes, attempt: int = 1, outputs: int = 1) -> int:
        """What a job asks for: the line times its margin, at least :data:`LEAST`, times ``attempt``, rounded up."""
        margin = self.memory_mb.margin if kind == "memory_mb" else self.minutes.margin if kind == "minutes" else max(
            (line.margin for line in self.disk_mb), default=1.0)
        return math.ceil(attempt * max(LEAST[kind], self.predict(kind, sizes, outputs) * margin))


# the rules no run on this machine can measure (they need the network), each a stated constant: memory (MB), minutes,
# disk (MB) and why
UNMEASURED = {
    "check_model": (4000, 60, 1, "loads a Hub model's weights (none can be fetched here); 4 GB holds BERT-large's "
                    "float32 weights twice"),
    "download_treebank": (1000, 60, 100, "downloads one CoNLL-U file (UD EWT's largest is 13 MB)"),
}


def constant(rule: str, memory_mb: float, minutes: float, disk_mb: float, why: str) -> Need:
    return Need(rule, Line({"base": memory_mb}, 1.0), Line({"base": minutes}, 1.0), (Line({"base": disk_mb}, 1.0),),
                f"not measured: {why}")


def load(path: str | os.PathLike[str] = NEEDS_FILE) -> dict[str, Need]:
    """Every rule's :class:`Need` in ``path`` (written by tools/fit_needs.py), and the :data:`UNMEASURED` rules'."""
    found = yaml.safe_load(Path(path).read_text()) or {}
    needs = {rule: constant(rule, *values) for rule, values in UNMEASURED.items()}
    for rule, entry in found.items():
        def line(value: Mapping[str, Any]) -> Line:
            return Line({k: float(v) for k, v in value["coefficients"].items()}, float(value.get("margin", 1.0)))
        needs[rule] = Need(rule, line(entry["memory_mb"]), line(entry["minutes"]),
                           tuple(line(value) for value in entry["disk_mb"]), str(entry.get("fitted", "")))
    return needs


def dump(needs: Mapping[str, Need], path: str | os.PathLike[str], header: str) -> None:
    def line(value: Line) -> dict[str, Any]:
        return {"coefficients": {k: float(f"{v:.6g}") for k, v in value.coefficients.items()}, "margin": round(value.margin, 3)}
    content = {rule: {"memory_mb": line(need.memory_mb), "minutes": line(need.minutes),
                      "disk_mb": [line(value) for value in need.disk_mb], "fitted": need.fitted}
               for rule, need in sorted(needs.items())}
    text = "".join(f"# {row}\n" if row else "#\n" for row in header.splitlines())
    Path(path).write_text(text + yaml.safe_dump(content, sort_keys=False, width=120))


# --- sizes of what a job reads -------------------------------------------------------------------------------------


def model_folder(path: Path) -> Path | None:
    """The model folder an input names: a ``resolved.json``'s ``path``, or a folder with ``config.json`` and
    safetensors weights; None for any other input."""
    if path.name == "resolved.json":
        folder = Path(json.loads(path.read_text())["path"])
        if not compatibility.is_hf_folder(folder):
            raise ValueError(f"{path}: its model folder {folder} holds no config.json and *.safetensors on this machine. "
                             f"Fix: delete {path} and rerun (rule resolve_model finds the model again).")
        return folder
    if path.is_dir() and compatibility.is_hf_folder(path):
        return path
    return None


def path_mb(path: Path) -> float:
    """MB on disk of a file, or of every file under a folder."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6
    return path.stat().st_size / 1e6


def _stamp(path: Path) -> tuple[int, ...]:
    """What changes when the weights do: the modification times of the safetensors files."""
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    return tuple(f.stat().st_mtime_ns for f in files)


@functools.lru_cache(maxsize=256)
def _parameters(path: str, stamp: tuple[int, ...]) -> float:
    """Millions of parameters of a model folder or one safetensors file (cached: Snakemake asks for a job's
    resources again each time it schedules)."""
    found = Path(path)
    return (compatibility.parameter_count(found) if found.is_dir() else compatibility.parameter_count(found.parent, [found])) / 1e6


def job_sizes(paths: Iterable[str | os.PathLike[str]], predicted: Mapping[str, Sizes] | None = None,
              root: str | os.PathLike[str] = ".") -> Sizes:
    """The :class:`Sizes` of a job reading ``paths`` (relative to ``root``). A path that does not exist takes its
    ``predicted`` sizes (a planned job's output: its ``parameters`` where it is a model); without them, a
    ``FileNotFoundError`` naming the path as given (Snakemake then shows the request as ``<TBD>``)."""
    parameters, read_mb = 0.0, 0.0
    for given in paths:
        path = Path(root) / given
        if not path.exists():
            if predicted is None or str(given) not in predicted:
                raise FileNotFoundError(errno.ENOENT, "an input of the job does not exist yet", str(given))
            sizes = predicted[str(given)]
            parameters, read_mb = max(parameters, sizes.parameters), read_mb + sizes.read_mb
            continue
        folder = model_folder(path)
        if folder is not None:
            parameters = max(parameters, _parameters(str(folder), _stamp(folder)))
        elif path.suffix == ".safetensors":  # a model folder's weights named file by file (rule resolve_model)
            parameters = max(parameters, _parameters(str(path), _stamp(path)))
        else:
            read_mb += path_mb(path)
    return Sizes(parameters, read_mb)


# --- requests of the workflow's rules --------------------------------------------------------------------------------


@dataclass
class Requests:
    """The resource functions of the workflow's rules (``mem_mb``, ``runtime``, ``disk_mb``): a rule's fitted
    :class:`Need`, or ``overrides`` (config ``compute.mem_mb``, MB) for its memory."""

    needs: Mapping[str, Need]
    overrides: Mapping[str, int] = field(default_factory=dict)

    def need(self, rule: str) -> Need:
        if rule not in self.needs:
            raise KeyError(f"no fitted need for rule {rule!r} in {NEEDS_FILE}. Fix: run tools/fit_needs.py on a finished "
                           "run that has the rule, or set compute.mem_mb for it.")
        return self.needs[rule]

    def memory(self, rule: str) -> Any:
        override = self.overrides.get(rule)
        if override is not None:
            return lambda wildcards, attempt: attempt * int(override)
        need = self.need(rule)
        return lambda wildcards, input, attempt: need.request("memory_mb", job_sizes(input), attempt)  # noqa: A002

    def runtime(self, rule: str) -> Any:
        need = self.need(rule)
        return lambda wildcards, input, attempt: need.request("minutes", job_sizes(input), attempt)  # noqa: A002

    def disk(self, rule: str) -> Any:
        need = self.need(rule)
        return lambda wildcards, input, attempt: need.request("disk_mb", job_sizes(input), 1, len(need.disk_mb))  # noqa: A002

    def resources(self, rule: str, runtime: bool = True) -> dict[str, Any]:
        """``mem_mb``, ``disk_mb`` and (unless the rule sizes its time otherwise) ``runtime``, for a rule's
        ``resources:`` (``**requests.resources(rule)``)."""
        found = {"mem_mb": self.memory(rule), "disk_mb": self.disk(rule)}
        if runtime:
            found["runtime"] = self.runtime(rule)
        return found


# --- the plan of a run ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedJob:
    """One job of a run, as the plan reads it: its rule, inputs, outputs (paths relative to the run's folder) and
    threads."""

    rule: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    threads: int = 1
    wildcards: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Plan:
    """What a run will need: per job its predicted sizes, memory, minutes and disk (the fitted lines with their
    margins, as it will ask for them), and the disk the run holds at once."""

    rows: list[dict[str, Any]]
    unknown: list[str]  # inputs whose size no job and no file gives (the plan cannot size the jobs that read them)

    def by_rule(self) -> list[dict[str, Any]]:
        """Per rule: jobs, the largest memory request, hours x threads requested (the runtime requests) and expected
        (the fitted lines, on a CPU like the one measured) and the disk of its outputs."""
        rules: dict[str, dict[str, Any]] = {}
        for row in self.rows:
            entry = rules.setdefault(row["rule"], {"rule": row["rule"], "jobs": 0, "memory_mb": 0, "cpu_hours": 0.0,
                                                   "expected_hours": 0.0, "disk_mb": 0.0})
            entry["jobs"] += 1
            entry["memory_mb"] = max(entry["memory_mb"], row["memory_mb"])
            entry["cpu_hours"] += row["minutes"] * row["threads"] / 60
            entry["expected_hours"] += row["expected_minutes"] * row["threads"] / 60
            entry["disk_mb"] += row["disk_mb"]
        return sorted(rules.values(), key=lambda entry: -entry["disk_mb"])

    def results_mb(self) -> float:
        return sum(row["disk_mb"] for row in self.rows)

    def checkpoint_mb(self, jobs_at_once: int) -> float:
        """The training checkpoints held at once: the largest ``jobs_at_once`` of them (a checkpoint lives while its
        job runs)."""
        sizes = sorted((row["checkpoint_mb"] for row in self.rows), reverse=True)
        return sum(sizes[:max(1, jobs_at_once)])

    def needed_mb(self, jobs_at_once: int) -> float:
        return self.results_mb() + self.checkpoint_mb(jobs_at_once)

    def summary(self, jobs_at_once: int, free: float | None = None) -> str:
        """The plan as a reader checks it: totals, then a Markdown table per rule, then the inputs it could not size."""
        rules = self.by_rule()
        expected, requested = sum(rule["expected_hours"] for rule in rules), sum(rule["cpu_hours"] for rule in rules)
        lines = [f"{len(self.rows)} jobs; results {self.results_mb() / 1e3:,.2f} GB, training checkpoints held at once "
                 f"({jobs_at_once} job(s) at a time) {self.checkpoint_mb(jobs_at_once) / 1e3:,.2f} GB: "
                 f"{self.needed_mb(jobs_at_once) / 1e3:,.2f} GB of disk"
                 + ("" if free is None else f" ({free / 1e3:,.1f} GB free)")
                 + f"; {expected:,.1f} CPU-hours expected by the fitted lines on a CPU like the one measured, "
                 f"{requested:,.1f} requested (margins and floors; tools/estimate_runtime.py prices a calibrated device)",
                 "", "| rule | jobs | largest memory request (MB) | hours x threads expected | requested | disk (MB) |",
                 "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['rule']} | {r['jobs']} | {r['memory_mb']:,} | {r['expected_hours']:,.2f} | {r['cpu_hours']:,.2f} | "
                  f"{r['disk_mb']:,.1f} |" for r in rules]
        if self.unknown:
            lines += ["", f"not sized (no file and no job writes it; counted as nothing): {', '.join(self.unknown[:5])}"
                      + (f" and {len(self.unknown) - 5} more" if len(self.unknown) > 5 else "")]
        return "\n".join(lines)


def spec_parameters(spec: str, base: str | os.PathLike[str]) -> float | None:
    """Millions of parameters of the model a config's spec names, from its weights' headers where they are on this
    machine (a folder, an installed package, a Hub model in the local cache); None where they are not."""
    try:
        folder = compatibility.local_folder(spec, Path(base))
    except compatibility.ModelSpecError:
        return None
    if folder is None:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(spec, "config.json")
        folder = Path(cached).parent if isinstance(cached, str) else None
    if folder is None or not compatibility.is_hf_folder(folder):
        return None
    return compatibility.parameter_count(folder) / 1e6


def plan(jobs: Sequence[PlannedJob], needs: Mapping[str, Need], root: str | os.PathLike[str] = ".",
         overrides: Mapping[str, int] | None = None, models: Mapping[str, float | None] | None = None) -> Plan:
    """Every job of ``jobs`` (in an order where a job comes after the jobs whose outputs it reads: a dry run's)
    sized: inputs that exist as they are, those a job before it writes as that job's predicted outputs (a model folder
    as the model it read: fine-tuning keeps the geometry; a ``resolved.json`` as ``models[path]``, the parameters of
    the spec it resolves, :func:`spec_parameters`), the rest listed as unknown and counted as nothing."""
    overrides = overrides or {}
    predicted: dict[str, Sizes] = {path: Sizes(parameters or 0.0, 0.0) for path, parameters in (models or {}).items()
                                   if parameters is not None}
    rows, unknown = [], []
    for job in jobs:
        known = {}
        for path in job.inputs:
            if not (Path(root) / path).exists() and path not in predicted:
                unknown.append(path)
                known[path] = Sizes()
        sizes = job_sizes(job.inputs, {**predicted, **known}, root)
        need = needs.get(job.rule)
        row = {"rule": job.rule, "wildcards": dict(job.wildcards), "threads": job.threads, "parameters": sizes.parameters,
               "read_mb": sizes.read_mb, "memory_mb": 0, "minutes": 0, "expected_minutes": 0.0, "disk_mb": 0.0, "checkpoint_mb": 0.0,
               "fitted": need is not None}
        if need is not None:
            row["memory_mb"] = int(overrides.get(job.rule) or need.request("memory_mb", sizes))
            row["minutes"] = need.request("minutes", sizes)
            row["expected_minutes"] = need.predict("minutes", sizes)
            disk = [line.at(sizes) * line.margin for line in need.disk_mb]
            if len(disk) != len(job.outputs):  # one line for all (or another count of outputs): split evenly
                total = disk[0] if len(disk) == 1 else sum(disk) / len(disk) * len(job.outputs)
                disk = [total / max(1, len(job.outputs))] * len(job.outputs)
            row["disk_mb"] = sum(disk)
            for path, mb in zip(job.outputs, disk):
                if path.endswith("resolved.json") and path in predicted:
                    continue  # the spec's own parameters (models)
                is_model = Path(path).name == "model" or path.endswith("resolved.json")
                predicted[path] = Sizes(sizes.parameters if is_model else 0.0, 0.0 if is_model else max(0.0, mb))
        if job.rule in TRAINING_RULES:
            row["checkpoint_mb"] = sizes.parameters * CHECKPOINT_BYTES_PER_PARAMETER
        rows.append(row)
    return Plan(rows, sorted(set(unknown)))


def free_mb(path: str | os.PathLike[str]) -> float:
    """Free MB on the filesystem holding ``path`` (its nearest existing parent). ``BERTOLOGY_FREE_DISK_MB`` replaces
    the reading (for tests of the check on a filesystem that is not small)."""
    forced = os.environ.get("BERTOLOGY_FREE_DISK_MB")
    if forced:
        return float(forced)
    path = Path(path).resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free / 1e6


def disk_problem(needed_mb: float, folder: str | os.PathLike[str], setting: str) -> str | None:
    """Why a run cannot start for lack of disk (None when it can): the need against the free space under ``folder``,
    with the fix and the setting that goes on anyway."""
    free = free_mb(folder)
    if needed_mb <= free:
        return None
    return (f"this run needs about {needed_mb / 1e3:,.1f} GB of disk under {Path(folder).resolve()} (its results and the "
            f"training checkpoints held at once), and {free / 1e3:,.1f} GB are free. Fix: free space or point the run "
            f"to a larger disk (snakemake --directory), run fewer tasks or models, or go on anyway with {setting}.")
