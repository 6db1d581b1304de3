"""Cluster submissions sized to the queue: the short model jobs of one model and task packed into submissions of
about a target length, so that no GPU waits in the queue and starts up for a minute's work.

A job is a :class:`Piece`: its rule and wildcards, the model and task it belongs to, its *unit* (the fine-tuned run
it analyses, or the pre-trained encoder's dumps), its estimate (the runtime it asks for, minutes: what the queue sees,
and what a group submission asks for as the sum of its jobs') and the pieces it reads from. :func:`pack` fills bins
with the pieces of one model and task, run after run and each run's jobs after those they read from (by their depth
in the DAG, then rule and wildcards), a new bin where the next piece would take a bin above ``target`` minutes; a piece that alone asks for
``target`` or more is submitted alone, and so is a piece whose inputs would leave its bin and come back (Snakemake
refuses a group that depends on itself through a job outside it). A last bin under half the target joins the one
before it. The bins are Snakemake job groups (rules/common.smk); a local run groups nothing.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bertology_core.data import states

# the model jobs that are short at a small task's size (a minute or two of a GPU each), grouped where they stay short
RULES = ("evaluate_pretrained", "dump_attention", "labelled_maps", "head_importance", "compact_model",
         "lottery_pruning", "subnetwork_finetune", "head_gates", "outlier_disabling")
_SEEDED = re.compile(rf"(?:{states.FINETUNED})/seed(?P<seed>\d+)")
Key = tuple[str, tuple[tuple[str, str], ...]]


def key(rule: str, wildcards: Mapping[str, str]) -> Key:
    """A job's identity: its rule and wildcards."""
    return rule, tuple(sorted((name, str(value)) for name, value in wildcards.items()))


def unit(wildcards: Mapping[str, str]) -> str:
    """The run a job belongs to: ``seed<n>`` for a fine-tuned run's jobs (and the pre-trained encoder's evaluation with
    that seed's head), a dump's state otherwise (``pretrained``, ``scratch/seed1``)."""
    if "seed" in wildcards:
        return f"seed{wildcards['seed']}"
    dumped = str(wildcards.get("dumped", ""))
    match = _SEEDED.fullmatch(dumped)
    return f"seed{match['seed']}" if match else dumped


@dataclass(frozen=True)
class Piece:
    """One job to place: ``minutes`` it asks for, ``after``: the jobs (any rule) it reads outputs of."""

    key: Key
    model: str
    task: str
    unit: str
    minutes: float
    after: frozenset[Key] = field(default_factory=frozenset)


def piece(rule: str, wildcards: Mapping[str, str], minutes: float) -> Piece | None:
    """A job of a short model rule (:data:`RULES`) as a piece to place (None for another rule's)."""
    if rule not in RULES:
        return None
    return Piece(key(rule, wildcards), str(wildcards["model"]), str(wildcards["task"]), unit(wildcards), minutes)


def _unit_order(name: str) -> tuple[int, int, str]:
    """The pre-trained encoder's first, then fine-tuned runs by seed, then the rest."""
    match = re.fullmatch(r"seed(\d+)", name)
    return (1, int(match[1]), "") if match else (0 if name == states.PRETRAINED else 2, 0, name)


def sized_tasks(tasks: Iterable[str], examples: Callable[[str], int | None], root: str | Path = ".") -> set[str]:
    """The tasks whose jobs can be sized: their prepared training split exists under ``root``, or ``examples(task)``
    (its local files' count) is known. A Hub dataset before ``prepare_data`` is not: its jobs would be sized by the
    floors, so :func:`pack` sends them alone."""
    return {task for task in tasks if (Path(root) / f"results/data/{task}/train.parquet").exists()
            or examples(task) is not None}


def pack(pieces: Iterable[Piece], target: float, parents: Mapping[Key, Iterable[Key]] | None = None,
         sized: Collection[str] | None = None) -> dict[Key, int | None]:
    """Each piece's bin (numbered from 0 across the whole run; None: submitted alone). ``parents``: every job's
    inputs' jobs (a whole run's, grouped or not), to keep a bin free of paths that leave it and come back; by default
    the pieces' own ``after``. ``sized``: the tasks whose pieces may be packed (:func:`sized_tasks`; None: all)."""
    pieces = list(pieces)
    graph: dict[Key, set[Key]] = defaultdict(set)
    for piece in pieces:
        graph[piece.key] |= set(piece.after)
    for child, found in (parents or {}).items():
        graph[child] |= set(found)
    ancestors: dict[Key, frozenset[Key]] = {}

    def up(node: Key) -> frozenset[Key]:
        if node not in ancestors:
            ancestors[node] = frozenset()  # a cycle cannot occur in a DAG; this only stops a bad input from recursing
            found: set[Key] = set()
            for parent in graph.get(node, ()):
                found |= {parent} | up(parent)
            ancestors[node] = frozenset(found)
        return ancestors[node]

    depth: dict[Key, int] = {}

    def level(node: Key) -> int:  # the longest path from a job that reads no job's output
        if node not in depth:
            depth[node] = 0
            depth[node] = 1 + max((level(parent) for parent in graph.get(node, ())), default=-1)
        return depth[node]

    placed: dict[Key, int | None] = {piece.key: None for piece in pieces}
    by_task: dict[tuple[str, str], dict[str, list[Piece]]] = defaultdict(lambda: defaultdict(list))
    for piece in pieces:
        if piece.minutes < target and (sized is None or piece.task in sized):
            by_task[(piece.model, piece.task)][piece.unit].append(piece)
    next_bin = 0
    for model_task in sorted(by_task):
        units = by_task[model_task]
        bins: list[list[Piece]] = []
        for name in sorted(units, key=_unit_order):
            for piece in sorted(units[name], key=lambda piece: (level(piece.key), piece.key)):  # after what it reads
                if not bins or sum(member.minutes for member in bins[-1]) + piece.minutes > target:
                    bins.append([])
                bins[-1].append(piece)
        if len(bins) > 1 and sum(piece.minutes for piece in bins[-1]) < target / 2:
            bins[-2].extend(bins.pop())
        for members in bins:
            inside = {piece.key for piece in members}
            changed = True
            while changed:  # a member reading a job outside the bin that reads from inside it leaves the bin
                changed = False
                for piece in list(members):
                    if any(parent not in inside and up(parent) & inside for parent in graph.get(piece.key, ())):
                        members.remove(piece)
                        inside.discard(piece.key)
                        changed = True
            if len(members) > 1:
                for piece in members:
                    placed[piece.key] = next_bin
                next_bin += 1
    return placed


@dataclass(frozen=True)
class Submission:
    """One submission of a run: its jobs (keys) and the minutes they ask for together."""

    rules: tuple[str, ...]
    jobs: int
    minutes: float
    model_job: bool


def submissions(jobs: Sequence[tuple[Key, float, bool]], placed: Mapping[Key, int | None]) -> list[Submission]:
    """The submissions a run makes of its cluster jobs, each (key, minutes asked, runs a model): alone unless
    ``placed`` bins it."""
    bins: dict[int, list[tuple[Key, float, bool]]] = defaultdict(list)
    alone = []
    for job in jobs:
        index = placed.get(job[0])
        (bins[index] if index is not None else alone).append(job)
    found = [Submission((job[0][0],), 1, job[1], job[2]) for job in alone]
    for members in bins.values():
        found.append(Submission(tuple(sorted({job[0][0] for job in members})), len(members),
                                sum(job[1] for job in members), any(job[2] for job in members)))
    return found


def report(jobs: Sequence[tuple[Key, float, bool]], placed: Mapping[Key, int | None], target: float) -> str:
    """How a run's cluster jobs go to the queue, one by one and packed (``target``: compute.submission_minutes)."""
    alone, packed = submissions(jobs, {}), submissions(jobs, placed)
    gpu = sorted((found for found in packed if found.model_job), key=lambda found: found.minutes)
    grouped = [found for found in packed if found.jobs > 1]
    sizes = sorted(found.jobs for found in grouped)
    lines = [f"{len(jobs)} cluster jobs: {len(alone)} submissions one by one ({sum(f.model_job for f in alone)} asking "
             f"for a GPU); packed at compute.submission_minutes {target:g}: {len(packed)} submissions "
             f"({len(gpu)} asking for a GPU), {len(grouped)} of them groups of {sum(sizes)} short model jobs"
             + (f" ({sizes[0]} to {sizes[-1]} jobs, median {sizes[len(sizes) // 2]})" if sizes else "")]
    if gpu:
        shortest = gpu[0]
        lines.append(f"the shortest GPU submission asks for {shortest.minutes:g} minutes ({shortest.jobs} job(s): "
                     f"{', '.join(shortest.rules)}); GPU submissions under 30 minutes: "
                     f"{sum(found.minutes < 30 for found in gpu)} ("
                     + ", ".join(f"{rules}: {count}" for rules, count in sorted(Counter(
                         "+".join(found.rules) for found in gpu if found.minutes < 30).items())) + ")")
    return "\n".join(lines)
