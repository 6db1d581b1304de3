"""What a job needs, memory, time and disk, from the sizes of what it reads: the requests a cluster that enforces its
limits gets, and the plan of a whole run before it starts.

A job's :class:`Sizes` are read from its input files as they are when it is about to run: the parameters of the model
it reads (its ``resolved.json``'s folder or a trained model's folder, counted from the safetensors headers; the
largest, where it reads several), the megabytes on disk of everything else it reads (data, token files, attention
dumps, sweep tables, probe features) and, for a training job, the word pieces of its largest batch (its batch size
times the longest example, after the cut, of the token files it reads: what a training step's activations grow with)
and its passes (how many times its work goes over what it reads where its config says so, as a probe's epochs and
seeds do; a stage declares them, ``Stage.passes``; once for every other rule).
Each rule's memory (MB, peak resident), time (minutes) and disk (MB its outputs hold) is a line in these sizes, with
coefficients of at least zero, so that a need never shrinks as a job reads more:

- memory: ``base + a * parameters + b * read_mb + c * batch_tokens``;
- minutes: ``base + a * parameters + c * read_mb + d * parameters * read_mb`` (loading the model and what grows with
  it alone, as a sweep's configurations do; every byte it reads, through the model), where a rule's jobs go over what
  they read a number of times its settings choose ``base + a * parameters + (c * read_mb + d * parameters * read_mb)
  * passes`` (fitted on the passes its measured jobs made, :meth:`Stage.passes_run`; asked for at the most its settings
  allow, :meth:`Stage.passes`);
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

import dataclasses
import errno
import functools
import json
import math
import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bertology_core.models import compatibility

NEEDS_FILE = Path(__file__).with_name("needs.yaml")
KINDS = ("memory_mb", "minutes", "disk_mb")
# the terms of each kind's line
TERMS = {"memory_mb": ("base", "parameters", "read_mb", "batch_tokens"),
         "minutes": ("base", "parameters", "read_mb", "parameters x read_mb", "read_mb x passes", "parameters x read_mb x passes"),
         "disk_mb": ("base", "parameters", "read_mb")}
# How a rule's memory grows with the megabytes its jobs read, as its stage declares it (``Stage.memory``): "holds"
# (a term in what it reads: it holds some of it whole, as the probes hold every layer's word features), "chunks" (no
# term: it reads its files a bounded chunk at a time, as the pattern CNN reads a model's dumps). Undeclared: a job that
# reads a model takes its data a batch at a time ("chunks"), any other "holds". A rule that does not grow has no term
# in what it reads, as a slope fitted over its jobs' files would only extrapolate their noise.
MEMORY_KINDS = ("holds", "chunks")


def memory_reads(rule: str, reads_a_model: bool, declared: Mapping[str, str]) -> bool:
    """Whether ``rule``'s memory line has a term in the megabytes its jobs read (``declared``: each stage's
    ``memory``, by rule)."""
    kind = declared.get(rule, "chunks" if reads_a_model else "holds")
    if kind not in MEMORY_KINDS:
        raise ValueError(f"rule {rule!r} declares memory {kind!r}; one of {MEMORY_KINDS}")
    return kind == "holds"


# what a request adds to the fitted line: a job's peak moves with the machine and the data's lengths, its time more
# (another CPU, a busy node, a filesystem), its outputs hardly
MARGIN = {"memory_mb": 1.3, "minutes": 2.0, "disk_mb": 1.2}
# the least a job asks for (an interpreter with polars or torch loaded; a cluster's shortest useful slot)
LEAST = {"memory_mb": 500, "minutes": 5, "disk_mb": 0}
# what a job's memory request adds to its script's: on a cluster the job's allocation also holds the Snakemake process
# that runs the script, which parses the workflow, and its shell. A dry run of Snakemake alone holds 225 MB here
# (`snakemake <one target> -n`), but the memory-enforcing test cluster (tests/test_slurm.py; Slurm sums the resident
# memory of every process of the step) killed outlier_dimensions at 996 MB while its script peaked at 666 MB: at least
# 330 MB beside the script (2026-11-29). The job records the lines are fitted on hold the script's peak alone
JOB_PROCESS_MB = 400
# the checkpoint a training job keeps while it runs: weights and AdamW's two moments in float32 (4 bytes each;
# bertology_core.finetune.training), twice while a new one is written beside the old before it replaces it
CHECKPOINT_BYTES_PER_PARAMETER = 24
TRAINING_RULES = ("finetune", "head_gates", "subnetwork_finetune")


@dataclass(frozen=True)
class Sizes:
    """What a job reads: ``parameters`` (millions) of the largest model, ``read_mb`` (MB; Parquet as decoded) of the rest,
    ``batch_tokens`` (thousands of word pieces in a training job's largest batch; 0 for a job that does not train) and
    ``passes``, how many times its work goes over what it reads as its settings say (:meth:`Stage.passes`; else 1)."""

    parameters: float = 0.0
    read_mb: float = 0.0
    batch_tokens: float = 0.0
    passes: float = 1.0

    def term(self, name: str) -> float:
        return {"base": 1.0, "parameters": self.parameters, "read_mb": self.read_mb, "batch_tokens": self.batch_tokens,
                "parameters x read_mb": self.parameters * self.read_mb, "read_mb x passes": self.read_mb * self.passes,
                "parameters x read_mb x passes": self.parameters * self.read_mb * self.passes}[name]


def training_hyperparameters(rule: str, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A training job's hyper-parameters from its params (None for another rule's job)."""
    return params.get("hyperparameters") if rule in TRAINING_RULES else None


@dataclass(frozen=True)
class Batch:
    """A training job's batches: examples per batch and where its examples are cut (word pieces), as its
    hyper-parameters say (``batch_size``, ``max_length``)."""

    size: int
    max_length: int

    @classmethod
    def of(cls, hyperparameters: Mapping[str, Any] | None) -> "Batch | None":
        if not hyperparameters:
            return None
        return cls(int(hyperparameters["batch_size"]), int(hyperparameters["max_length"]))

    def thousands_of_tokens(self, longest: int | None) -> float:
        """Word pieces (thousands) of the largest batch: the longest example's (None: not known yet, the cut)."""
        return self.size * min(self.max_length, self.max_length if longest is None else longest) / 1e3


@dataclass(frozen=True)
class Line:
    """A fitted line: a coefficient per term (:data:`TERMS`), and the margin a request multiplies it by."""

    coefficients: Mapping[str, float]
    margin: float = 1.0

    def at(self, sizes: Sizes) -> float:
        return sum(value * sizes.term(term) for term, value in self.coefficients.items())


@dataclass(frozen=True)
class Need:
    """A rule's lines (:data:`KINDS`; ``disk_mb``: one line per output, or one for all), what its outputs give the
    jobs that read them (``gives_mb``: MB as read, :func:`path_mb`, lines as ``disk_mb``'s; none: their bytes on disk),
    and what they were fitted on."""

    rule: str
    memory_mb: Line
    minutes: Line
    disk_mb: tuple[Line, ...]
    fitted: str = ""
    gives_mb: tuple[Line, ...] = ()

    def predict(self, kind: str, sizes: Sizes, outputs: int = 1) -> float:
        """The fitted value (no margin) of ``kind`` for a job of ``sizes`` (``outputs``: how many it writes)."""
        return sum(self.outputs_mb(sizes, outputs, margin=False)) if kind == "disk_mb" else getattr(self, kind).at(sizes)

    def outputs_mb(self, sizes: Sizes, outputs: int, margin: bool = True, given: bool = False) -> list[float]:
        """MB on disk (``given``: as read) of each of ``outputs`` outputs (with each line's margin): a line per output
        where the fit had one per output, else the lines' mean shared evenly."""
        lines = self.gives_mb if given and self.gives_mb else self.disk_mb
        values = [line.at(sizes) * (line.margin if margin else 1.0) for line in lines]
        if len(values) == outputs:
            return values
        total = values[0] if len(values) == 1 else sum(values) / max(1, len(values)) * outputs
        return [total / max(1, outputs)] * outputs

    def request(self, kind: str, sizes: Sizes, attempt: int = 1, outputs: int = 1) -> int:
        """What a job asks for: the line times its margin (disk: each output's), at least :data:`LEAST` (memory: plus
        :data:`JOB_PROCESS_MB`), times ``attempt``, rounded up."""
        value = sum(self.outputs_mb(sizes, outputs)) if kind == "disk_mb" else (
            getattr(self, kind).at(sizes) * getattr(self, kind).margin)
        return math.ceil(attempt * (max(LEAST[kind], value) + (JOB_PROCESS_MB if kind == "memory_mb" else 0)))


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
                           tuple(line(value) for value in entry["disk_mb"]), str(entry.get("fitted", "")),
                           tuple(line(value) for value in entry.get("gives_mb", ())))
    return needs


def dump(needs: Mapping[str, Need], path: str | os.PathLike[str], header: str) -> None:
    def line(value: Line) -> dict[str, Any]:
        return {"coefficients": {k: float(f"{v:.6g}") for k, v in value.coefficients.items()}, "margin": round(value.margin, 3)}
    content = {rule: {"memory_mb": line(need.memory_mb), "minutes": line(need.minutes),
                      "disk_mb": [line(value) for value in need.disk_mb],
                      "gives_mb": [line(value) for value in need.gives_mb], "fitted": need.fitted}
               for rule, need in sorted(needs.items())}
    text = "".join(f"# {row}\n" if row else "#\n" for row in header.splitlines())
    Path(path).write_text(text + yaml.safe_dump(content, sort_keys=False, width=120))


# --- sizes of what a job reads -------------------------------------------------------------------------------------


def model_folder(path: Path) -> Path | None:
    """The model folder an input names: a ``resolved.json``'s ``path``, or a folder with ``config.json`` and
    safetensors weights; None for any other input."""
    if path.name == "resolved.json":
        try:
            folder = Path(json.loads(path.read_text())["path"])
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(f"{path}: not a resolved model ({error!r}). Fix: delete it and rerun (rule resolve_model "
                             "writes it).") from None
        if not compatibility.is_hf_folder(folder):
            raise ValueError(f"{path}: its model folder {folder} holds no config.json and *.safetensors on this machine. "
                             f"Fix: delete {path} and rerun (rule resolve_model finds the model again).")
        return folder
    if path.is_dir() and compatibility.is_hf_folder(path):
        return path
    return None


def disk_mb(path: Path) -> float:
    """MB on disk of a file, or of every file under a folder (what an output takes)."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6
    return path.stat().st_size / 1e6


def path_mb(path: Path) -> float:
    """MB a job reads of a file, or of every file under a folder: a Parquet file's as decoded in memory (from its
    footer: each column chunk's values times their width, or its uncompressed bytes for text; a sweep table of one
    repeated prediction is kilobytes on disk and as many rows in memory as any other), any other file's bytes."""
    if path.is_dir():
        return sum(_file_mb(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(path.rglob("*")) if f.is_file())
    return _file_mb(str(path), path.stat().st_size, path.stat().st_mtime_ns)


def _file_mb(path: str, size: int, stamp: int) -> float:
    footer = _parquet_footer(path, size, stamp) if path.endswith(".parquet") else None
    return size / 1e6 if footer is None else footer[0]


@functools.lru_cache(maxsize=4096)
def _parquet_footer(path: str, size: int, stamp: int) -> tuple[float, int | None] | None:
    """What a Parquet file's footer says of it, read once (cached by size and time): its MB as decoded (each column
    chunk's values times their width, or its uncompressed bytes for text) and, for a token file (rule
    ``tokenize_data``), its longest example (word pieces after the cut: the largest ``full_length`` in its row groups'
    statistics, at most its ``max_length``; the cut where a row group has none); None where it is not Parquet."""
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_metadata(path)
    except (OSError, ValueError):
        return None
    total = 0
    for group in range(metadata.num_row_groups):
        for column in range(metadata.num_columns):
            chunk = metadata.row_group(group).column(column)
            width = _WIDTHS.get(chunk.physical_type)
            total += chunk.num_values * width if width else chunk.total_uncompressed_size
    cut, names = (metadata.metadata or {}).get(b"max_length"), metadata.schema.names
    longest = None
    if cut is not None and "full_length" in names:
        column, longest = names.index("full_length"), 0
        for group in range(metadata.num_row_groups):
            statistics = metadata.row_group(group).column(column).statistics
            if statistics is None or not statistics.has_min_max:
                longest = int(cut)
                break
            longest = max(longest, int(statistics.max))
        longest = min(int(cut), longest)
    return total / 1e6, longest


# bytes a value of a Parquet physical type takes decoded (Arrow's widths: small integers are stored as INT32)
_WIDTHS = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}


def _stamp(folder: Path) -> tuple[tuple[int, int, int], ...]:
    """What changes when the weights do: each safetensors file's inode, size and modification time (a copy that keeps
    the old time still changes the inode or the size)."""
    return tuple((f.stat().st_ino, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(folder.glob("*.safetensors")))


@functools.lru_cache(maxsize=256)
def _parameters(folder: str, stamp: tuple[tuple[int, int, int], ...]) -> float:
    """Millions of parameters of a model folder (cached: Snakemake asks for a job's resources again each time it
    schedules)."""
    return compatibility.parameter_count(Path(folder)) / 1e6


def job_sizes(paths: Iterable[str | os.PathLike[str]], predicted: Mapping[str, Sizes] | None = None,
              root: str | os.PathLike[str] = ".", batch: Batch | None = None) -> Sizes:
    """The :class:`Sizes` of a job reading ``paths`` (relative to ``root``); ``batch``: a training job's batches
    (the longest example of the token files it reads sets its largest batch; the cut, where none exists yet). A path
    that does not exist takes its ``predicted`` sizes (a planned job's output: its ``parameters`` where it is a model);
    without them, a ``FileNotFoundError`` naming the path as given (Snakemake then shows the request as ``<TBD>``)."""
    parameters, read_mb, longest, seen = 0.0, 0.0, 0, False
    for given in paths:
        path = Path(root) / given
        if not path.exists():
            if predicted is None or str(given) not in predicted:
                raise FileNotFoundError(errno.ENOENT, "an input of the job does not exist yet", str(given))
            sizes = predicted[str(given)]
            parameters, read_mb = max(parameters, sizes.parameters), read_mb + sizes.read_mb
            continue
        folder = model_folder(path)
        if folder is None and path.suffix == ".safetensors" and compatibility.is_hf_folder(path.parent):
            folder = path.parent  # a model folder's weights named file by file (rule resolve_model): all its shards
        if folder is not None:
            parameters = max(parameters, _parameters(str(folder), _stamp(folder)))
        else:
            read_mb += path_mb(path)
            if batch is not None and path.suffix == ".parquet":
                footer = _parquet_footer(str(path), path.stat().st_size, path.stat().st_mtime_ns)
                found = None if footer is None else footer[1]
                if found is not None:
                    longest, seen = max(longest, found), True
    tokens = batch.thousands_of_tokens(longest if seen else None) if batch is not None else 0.0
    return Sizes(parameters, read_mb, tokens)


# rules no measured run has fitted yet -> the fitted rule whose needs they take meanwhile, one that reads and writes
# the same kinds of files: a given classifier resolved as a model is; its evaluation writes a run folder as fine-tuning
# does (its memory and time then over-ask: no training)
BORROWED = {"resolve_finetuned": "resolve_model", "evaluate_finetuned": "finetune"}


# --- requests of the workflow's rules --------------------------------------------------------------------------------


@dataclass
class Requests:
    """The resource functions of the workflow's rules (``mem_mb``, ``runtime``, ``disk_mb``): a rule's fitted
    :class:`Need`, or ``overrides`` (config ``compute.mem_mb``, MB) for its memory; ``passes``: how many times a job
    (its rule and wildcards) goes over what it reads, as the config says (:meth:`Stage.passes`; none: once)."""

    needs: Mapping[str, Need]
    overrides: Mapping[str, int] = field(default_factory=dict)
    passes: Callable[[str, Mapping[str, str], Mapping[str, Any]], float] | None = None

    def need(self, rule: str) -> Need:
        """The rule's fitted need; for a rule with none but a memory override (a new rule, before a run measured it),
        the floors (:data:`LEAST`) for its time and disk."""
        if rule in self.needs:
            return self.needs[rule]
        if rule in BORROWED and rule not in self.overrides and BORROWED[rule] in self.needs:
            return self.needs[BORROWED[rule]]
        if rule in self.overrides:
            return constant(rule, self.overrides[rule], LEAST["minutes"], LEAST["disk_mb"], "compute.mem_mb, not fitted")
        raise KeyError(f"no fitted need for rule {rule!r} in {NEEDS_FILE}. Fix: set compute.mem_mb for it (its time and "
                       "disk then ask for the floors), run it, and fit again (tools/fit_needs.py measure and fit).")

    @staticmethod
    def sizes(input: Any, batch: Batch | None = None) -> Sizes:  # noqa: A002
        """:func:`job_sizes` of a job about to be scheduled: an input that cannot be read as it should (a resolved
        model whose folder is gone) leaves the request unknown (Snakemake's ``<TBD>``, as for a missing input), so that
        the dry run shows the jobs and the job that rewrites it runs first."""
        try:
            return job_sizes(input, batch=batch)
        except ValueError as error:
            raise FileNotFoundError(errno.ENOENT, str(error)) from None

    def memory(self, rule: str, hyperparameters: Callable[[Any], Mapping[str, Any]] | None = None) -> Any:
        override = self.overrides.get(rule)
        if override is not None:
            return lambda wildcards, attempt: attempt * int(override)
        need = self.need(rule)

        def memory_mb(wildcards: Any, input: Any, attempt: int) -> int:  # noqa: A002
            batch = Batch.of(hyperparameters(wildcards)) if hyperparameters else None
            return need.request("memory_mb", self.sizes(input, batch), attempt)
        return memory_mb

    def runtime(self, rule: str) -> Any:
        need, passes = self.need(rule), self.passes

        def minutes(wildcards: Any, input: Any, attempt: int) -> int:  # noqa: A002
            named = dict(input.items()) if hasattr(input, "items") else {}  # Snakemake's named inputs
            times = passes(rule, dict(wildcards.items()), named) if passes else 1.0
            return need.request("minutes", dataclasses.replace(self.sizes(input), passes=times), attempt)
        return minutes

    def device_memory(self, rule: str, hyperparameters: Callable[[Any], Mapping[str, Any]] | None = None) -> Any:
        """A model job's ``gpu_mem_mb``: MB it holds on its GPU, as its memory line gives them with nothing read but
        the model (``read_mb`` 0: the data stay on the host): the weights, a training job's gradients, optimizer state
        and its largest batch's activations, and the line's base, which stands for the CUDA context (about 0.5 GB a
        process). Fitted on CPU jobs, whose peak holds all of these in host memory, so an upper estimate (the CPU job
        also holds the loaded weights' file); not scaled by the attempt. A profile that sets a ``gpu_mem_mb`` resource
        (profiles/gpu: the card's memory) runs model jobs side by side on one GPU while their sum fits (the workflow
        caps a request at the card, so a larger job runs alone)."""
        need = self.need(rule)  # the fitted line (a host memory override, compute.mem_mb, is not the GPU's)

        def gpu_mem_mb(wildcards: Any, input: Any) -> int:  # noqa: A002
            batch = Batch.of(hyperparameters(wildcards)) if hyperparameters else None
            sizes = dataclasses.replace(self.sizes(input, batch), read_mb=0.0)
            return math.ceil(max(LEAST["memory_mb"], need.memory_mb.at(sizes) * need.memory_mb.margin))
        return gpu_mem_mb

    def disk(self, rule: str) -> Any:
        need = self.need(rule)
        return lambda wildcards, input, attempt: need.request("disk_mb", self.sizes(input), 1, len(need.disk_mb))  # noqa: A002

    def resources(self, rule: str, runtime: bool = True,
                  hyperparameters: Callable[[Any], Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """``mem_mb``, ``disk_mb`` and (unless the rule sizes its time otherwise) ``runtime``, for a rule's
        ``resources:`` (``**requests.resources(rule)``); ``hyperparameters``: a training rule's, from the job's
        wildcards (its batch size and cut)."""
        found = {"mem_mb": self.memory(rule, hyperparameters), "disk_mb": self.disk(rule)}
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
    hyperparameters: Mapping[str, Any] | None = None  # a training job's (its batch size and cut)
    # its outputs that are models (named ``model`` in its rule: a model folder, or a resolved.json naming one)
    models: tuple[str, ...] = ()
    # the minutes it asks for where its rule sizes its time otherwise than by the fitted line (the training rules)
    runtime: int | None = None
    named_inputs: Mapping[str, str] = field(default_factory=dict)  # its inputs by name, as its rule names them

    @classmethod
    def of(cls, rule: str, inputs: Iterable[Any], outputs: Iterable[Any], threads: int, wildcards: Mapping[str, Any],
           params: Mapping[str, Any], named_outputs: Mapping[str, Any], runtime: Any = None,
           named_inputs: Mapping[str, Any] | None = None) -> "PlannedJob":
        """A job as Snakemake holds it (its inputs, outputs, named outputs, params, runtime resource and named inputs)."""
        return cls(rule, tuple(map(str, inputs)), tuple(map(str, outputs)), threads, {k: str(v) for k, v in wildcards.items()},
                   training_hyperparameters(rule, params), tuple(str(path) for name, path in named_outputs.items() if name == "model"),
                   int(runtime) if rule in TRAINING_RULES and isinstance(runtime, (int, float)) else None,
                   {name: str(path) for name, path in (named_inputs or {}).items() if isinstance(path, (str, os.PathLike))})


@dataclass
class PlannedNeed:
    """One planned job's sizes and what it will ask for: ``memory_mb`` and ``minutes`` as its requests (margins,
    floors, overrides), ``expected_minutes`` as its line, ``disk_mb`` of its outputs, ``checkpoint_mb`` held while it
    trains; ``fitted``: whether its rule has a fitted need (else it asks for nothing)."""

    rule: str
    wildcards: Mapping[str, str]
    threads: int
    sizes: Sizes
    fitted: bool
    memory_mb: int = 0
    minutes: int = 0
    expected_minutes: float = 0.0
    disk_mb: float = 0.0
    checkpoint_mb: float = 0.0


@dataclass
class Plan:
    """What a run will need: per job its predicted sizes, memory, minutes and disk (the fitted lines with their
    margins, as it will ask for them), and the disk the run holds at once."""

    rows: list[PlannedNeed]
    unknown: list[str]  # inputs whose size no job and no file gives (the plan cannot size the jobs that read them)

    def by_rule(self) -> list[dict[str, Any]]:
        """Per rule: jobs, the largest memory request, hours x threads requested (the runtime requests) and expected
        (the fitted lines, on a CPU like the one measured) and the disk of its outputs."""
        rules: dict[str, dict[str, Any]] = {}
        for row in self.rows:
            entry = rules.setdefault(row.rule, {"rule": row.rule, "jobs": 0, "memory_mb": 0, "cpu_hours": 0.0,
                                                "expected_hours": 0.0, "disk_mb": 0.0})
            entry["jobs"] += 1
            entry["memory_mb"] = max(entry["memory_mb"], row.memory_mb)
            entry["cpu_hours"] += row.minutes * row.threads / 60
            entry["expected_hours"] += row.expected_minutes * row.threads / 60
            entry["disk_mb"] += row.disk_mb
        return sorted(rules.values(), key=lambda entry: -entry["disk_mb"])

    def results_mb(self) -> float:
        return sum(row.disk_mb for row in self.rows)

    def checkpoint_mb(self, jobs_at_once: int) -> float:
        """The training checkpoints held at once: the largest ``jobs_at_once`` of them (a checkpoint lives while its
        job runs)."""
        sizes = sorted((row.checkpoint_mb for row in self.rows), reverse=True)
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


def spec_parameters(spec: str, base: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> float | None:
    """Millions of parameters of the model a config's spec names, from its weights' headers where they are on this
    machine (a folder, an installed package, a Hub model in the local cache); None where they are not."""
    try:
        folder = compatibility.local_folder(spec, Path(base))
    except compatibility.ModelSpecError:
        return None
    if folder is None:
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(spec, "config.json", cache_dir=cache_dir)
        except ValueError:  # not a Hub id at all (huggingface_hub's validation error): check_model says so, clearly
            return None
        folder = Path(cached).parent if isinstance(cached, str) else None
    if folder is None or not compatibility.is_hf_folder(folder):
        return None
    return compatibility.parameter_count(folder) / 1e6


def model_parameters(specs: Mapping[str, str], base: str | os.PathLike[str],
                     cache_dir: str | os.PathLike[str] | None = None,
                     given: Mapping[tuple[str, str, int], str] | None = None) -> dict[str, float | None]:
    """Each model's ``resolved.json`` (as the workflow writes it) as the parameters of the spec it resolves
    (:func:`spec_parameters`; ``cache_dir``: config ``model_cache``), for a plan made before the models are resolved;
    ``given``: (model, task, seed) -> the spec of a fine-tuned classifier given for that run (models[].finetuned)."""
    found = {f"results/models/{name}/resolved.json": spec_parameters(spec, base, cache_dir) for name, spec in specs.items()}
    found.update({f"results/models/{model}/finetuned/{task}/seed{seed}/resolved.json": spec_parameters(spec, base, cache_dir)
                  for (model, task, seed), spec in (given or {}).items()})
    return found


def unsized_models(parameters: Mapping[str, float | None]) -> str | None:
    """What a plan cannot size (None when it can): the models whose weights are not on this machine yet."""
    unsized = [str(Path(path).parent).removeprefix("results/models/") for path, value in parameters.items() if value is None]
    if not unsized:
        return None
    return (f"models whose weights are not on this machine yet: {', '.join(unsized)}; the plan sizes their jobs as if "
            "they had none (their models, checkpoints and memory count as nothing). Fix: resolve them first "
            "(snakemake results/models/<model>/resolved.json) or fetch them into the Hub cache, then plan again.")


def plan(jobs: Sequence[PlannedJob], needs: Mapping[str, Need], root: str | os.PathLike[str] = ".",
         overrides: Mapping[str, int] | None = None, models: Mapping[str, float | None] | None = None,
         passes: Callable[[str, Mapping[str, str], Mapping[str, Any]], float] | None = None) -> Plan:
    """Every job of ``jobs`` (in an order where a job comes after the jobs whose outputs it reads: a dry run's)
    sized: inputs that exist as they are, those a job before it writes as that job's predicted outputs (a model folder
    as the model it read: fine-tuning keeps the geometry; a ``resolved.json`` as ``models[path]``, the parameters of
    the spec it resolves, :func:`spec_parameters`), the rest listed as unknown and counted as nothing; ``passes`` as
    :class:`Requests`'."""
    overrides = overrides or {}
    predicted: dict[str, Sizes] = {path: Sizes(parameters or 0.0, 0.0) for path, parameters in (models or {}).items()
                                   if parameters is not None}
    rows: list[PlannedNeed] = []
    unknown: list[str] = []
    for job in jobs:
        known = {}
        for path in job.inputs:
            if not (Path(root) / path).exists() and path not in predicted:
                unknown.append(path)
                known[path] = Sizes()
        sizes = dataclasses.replace(job_sizes(job.inputs, {**predicted, **known}, root, Batch.of(job.hyperparameters)),
                                    passes=passes(job.rule, job.wildcards, {name: Path(root) / path for name, path
                                                                            in job.named_inputs.items()}) if passes else 1.0)
        need = needs.get(job.rule) or needs.get(BORROWED.get(job.rule, ""))
        row = PlannedNeed(job.rule, dict(job.wildcards), job.threads, sizes, need is not None)
        if need is not None:
            row.memory_mb = int(overrides.get(job.rule) or need.request("memory_mb", sizes))
            row.minutes = need.request("minutes", sizes) if job.runtime is None else job.runtime
            row.expected_minutes = need.predict("minutes", sizes)
            row.disk_mb = sum(need.outputs_mb(sizes, len(job.outputs)))
            for path, mb in zip(job.outputs, need.outputs_mb(sizes, len(job.outputs), given=True)):
                if path in job.models and path in predicted:
                    continue  # a resolved spec's own parameters (``models``)
                is_model = path in job.models
                predicted[path] = Sizes(sizes.parameters if is_model else 0.0, 0.0 if is_model else max(0.0, mb))
        if job.rule in TRAINING_RULES:
            row.checkpoint_mb = sizes.parameters * CHECKPOINT_BYTES_PER_PARAMETER
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
