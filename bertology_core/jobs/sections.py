"""What a stage shows: the summaries it writes for each model and the report section they form.

A stage declares its :class:`Section` in its own package (``bertology_core/<stage>/stage.py``); the workflow gathers
them in the stages' order. Torch-free: read while Snakemake parses the workflow."""

from __future__ import annotations

import dataclasses

from bertology_core.summaries.files import FIGURE_FILES, TABLE_FILES

FineTuned = tuple[str, str, int]  # (task, state, seed): one fine-tuning run of a model

# a summary that writes (or shows) both a table and a figure
BOTH = ("table", "figure")


@dataclasses.dataclass(frozen=True)
class Summary:
    """One summary a stage writes for each model: a tidy table (figures.write_table) and/or a figure
    (figures.save_chart) at ``stem`` (under results/, with ``{model}``). ``name``: the rule's output name (what its
    script writes to); ``files``: what is written (``table``, ``figure``); ``shown``: what the report page shows of it,
    in order (none: written for the claims, the atlases or a reader, but not on the page); ``title`` and ``note``: the
    page's title of its table (else its file name) and what the page says under it, after the note the table keeps in
    its Parquet file (a figure carries its own title and caption)."""

    name: str
    stem: str
    files: tuple[str, ...] = ("table",)
    shown: tuple[str, ...] = ("table",)
    title: str = ""
    note: str = ""

    def paths(self) -> list[str]:
        """Every file written (under results/, with ``{model}``): the page links each table's files, so each is a
        target of ``all`` and a deleted one is written again by the next run."""
        return [self.stem + ext for kind in self.files for ext in (TABLE_FILES if kind == "table" else FIGURE_FILES)]


@dataclasses.dataclass(frozen=True)
class Section:
    """One section of the report page (report/sections/<anchor>.rst says what it shows, from which paper), its title
    (else its anchor) and the summaries its stage writes."""

    anchor: str
    summaries: tuple[Summary, ...]
    title: str = ""

    def shown(self) -> list[tuple[str, str]]:
        """(kind, stem) of every item the page shows, in order."""
        return [(kind, summary.stem) for summary in self.summaries for kind in summary.shown]

    def paths(self) -> list[str]:
        return list(dict.fromkeys(path for summary in self.summaries for path in summary.paths()))


@dataclasses.dataclass(frozen=True)
class SectionRuns:
    """A section for one model under one set of verdicts. ``runs``: whether its stage runs (its summaries are then
    targets of ``all`` and shown on the page); ``shows``: the fine-tuned models (task, state, seed) whose results it
    shows (the page warns about unfit ones); ``analyses_fine_tuned``: whether its stage analyses a model fine-tuned
    from the pre-trained encoder, None for a stage that only reports on them (``fitness.if_unfit: skip`` can leave the
    others empty, and the page then says why)."""

    runs: bool
    shows: list[FineTuned]
    analyses_fine_tuned: bool | None
