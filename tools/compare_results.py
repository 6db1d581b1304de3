"""Compare two results folders of the same config, made before and after a change to the code (a refactor that must
not change any result), file by file.

    python tools/compare_results.py BEFORE_RESULTS AFTER_RESULTS [--rename OLD=NEW ...] [--respell REGEX=REPLACEMENT ...]
                                    [--ignore GLOB ...] [--show N] [--list]

Each folder is a run's ``results`` folder. ``--rename OLD=NEW`` (repeatable) declares results the change moved: a
path of the run before that starts with ``OLD`` (relative to its results folder, e.g. ``finetune/m/MRPC/untuned/``
or ``attention/m/MRPC/untuned.``) is compared with the path that starts with ``NEW`` instead (the longest matching
``OLD`` wins), and inside the files of the run before, every string that names ``results/OLD`` names
``results/NEW`` (records name the files they were made from). ``--respell REGEX=REPLACEMENT`` (repeatable) declares
a name the change spelt anew wherever it occurs: Python's ``re.sub`` applied, after the renames, to the run before's
paths and to every string in its files (e.g. ``--respell '(finetuned|scratch)_seed(\d+)=\1/seed\2'``). ``--ignore GLOB`` (repeatable) leaves out more files
(``fnmatch`` patterns on the path relative to the results folder).

Files that differ between any two runs of one config are left out as the tests leave them out
(tests/workflow_utils.py): the folders VOLATILE_DIRS (benchmark timings, checkpoints) and the files VOLATILE_FILES
(disk usage, measured speed-ups, the page and its screenshots); in JSON records the keys VOLATILE_KEYS and every
timing (``seconds``, ``*_seconds``), and the run's own directory, written ``<workdir>``. Logs live outside
``results`` and are never compared.

A file identical byte for byte is ``identical``; otherwise it is compared by value: Parquet and CSV tables cell by
cell (column names and types too; NaN equals NaN, as in polars' ``DataFrame.equals``) with the note kept in the
footer (:func:`bertology_core.summaries.figures.write_table`), JSON records as data,
Markdown line by line, Safetensors weights tensor by tensor (dtype, shape and bytes) with their metadata, anything
else byte for byte. Equal values are ``same values``; a table (Parquet, CSV or Markdown) or JSON list whose rows are
the same but in another order is ``same values, another row order`` (accepted, and listed with ``--list``). A
figure's PNG, SVG or HTML drawn from a Vega-Lite spec (``<stem>.vl.json``, compared with Altair's dataset names,
hashes of their rows, numbered instead) that has the same values is ``redrawn from the same spec`` even where its
bytes differ.

Prints a summary: files compared, each outcome's count, the files that differ (with the first difference of each)
and the files found in one run only. Exits 1 when a file differs or is in one run only, 0 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import io
import json
import re
import sys
from collections import Counter
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from workflow_utils import VOLATILE_DIRS, VOLATILE_FILES, VOLATILE_KEYS, normalised_json  # noqa: E402

IDENTICAL, SAME_VALUES, REORDERED, REDRAWN = ("identical", "same values", "same values, another row order",
                                              "redrawn from the same spec")
DRAWINGS = (".png", ".svg", ".html")


class Differs(Exception):
    """The two files differ (the message says where)."""


# --- renamed paths ---------------------------------------------------------------------------------------------------


class Renames:
    """The ``--rename OLD=NEW`` pairs: prefixes of paths relative to the results folder."""

    def __init__(self, pairs: list[tuple[str, str]] | None = None, respell: list[tuple[str, str]] | None = None):
        self.pairs = sorted(pairs or [], key=lambda pair: -len(pair[0]))  # the longest prefix first
        self.respell = [(re.compile(pattern), replacement) for pattern, replacement in respell or []]
        self._text = re.compile("|".join(re.escape(f"results/{old}") for old, _ in self.pairs)) if self.pairs else None
        self._new = {f"results/{old}": f"results/{new}" for old, new in self.pairs}

    @staticmethod
    def parse(text: str) -> tuple[str, str]:
        old, sep, new = text.partition("=")
        if not sep or not old:
            raise argparse.ArgumentTypeError(f"{text!r}: expected OLD=NEW (--rename: path prefixes under results/; --respell: a regular expression and its replacement)")
        return old, new

    @staticmethod
    def parse_respelling(text: str) -> tuple[str, str]:
        """``REGEX=REPLACEMENT``, split at the last ``=`` (a regular expression may hold one: ``(?=...)``)."""
        pattern, sep, replacement = text.rpartition("=")
        if not sep or not pattern:
            raise argparse.ArgumentTypeError(f"--respell {text!r}: expected REGEX=REPLACEMENT")
        try:
            re.compile(pattern)
        except re.error as error:
            raise argparse.ArgumentTypeError(f"--respell {text!r}: {pattern!r} is no regular expression ({error})") from None
        return pattern, replacement

    def path(self, relative: str) -> str:
        """A path of the run before (relative to its results folder) -> the path it has in the run after."""
        for old, new in self.pairs:
            if relative.startswith(old):
                relative = new + relative[len(old):]
                break
        return self._respelt(relative)

    def text(self, text: str) -> str:
        """A string of the run before with every ``results/OLD`` it names renamed and every respelling applied."""
        return self._respelt(self._text.sub(lambda m: self._new[m[0]], text) if self._text else text)

    def _respelt(self, text: str) -> str:
        for pattern, replacement in self.respell:
            text = pattern.sub(replacement, text)
        return text

    def value(self, value):
        """A table cell or JSON value of the run before with its strings renamed (in lists and mappings too)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value


# --- comparing one file ----------------------------------------------------------------------------------------------


def _rows_compare(before_header, before_rows, after_header, after_rows, where) -> str:
    """Tables as header and rows of cells, the run before's already renamed: ``same`` or ``reordered``."""
    if before_header != after_header:
        raise Differs(f"{where}: columns {before_header} (before) != {after_header}")
    if len(before_rows) != len(after_rows):
        raise Differs(f"{where}: {len(before_rows)} rows (before) != {len(after_rows)}")
    if before_rows == after_rows:
        return "same"
    key = lambda row: json.dumps(row, default=str, sort_keys=True)  # noqa: E731
    if sorted(before_rows, key=key) == sorted(after_rows, key=key):
        return "reordered"
    for index, (a, b) in enumerate(zip(before_rows, after_rows)):
        if a != b:
            cells = [f"column {after_header[c]!r}: {x!r} -> {y!r}" for c, (x, y) in enumerate(zip(a, b)) if x != y]
            raise Differs(f"{where}: row {index + 1}: " + "; ".join(cells[:3]))
    raise Differs(f"{where}: rows differ")


def _comparable(value):
    """NaN equals NaN here, as in polars' DataFrame.equals (the tests' comparison)."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    return value


def _parquet(before: Path, after: Path, renames: Renames) -> str:
    a, b = pl.read_parquet(before), pl.read_parquet(after)
    # the note a stage keeps in the footer is what the report prints under the table: part of the result
    notes = [pl.read_parquet_metadata(path).get("note", "") for path in (before, after)]
    if (old := renames.text(notes[0])) != notes[1]:
        at = next((i for i, (x, y) in enumerate(zip(old, notes[1])) if x != y), min(len(old), len(notes[1])))
        start = max(0, at - 30)  # from just before the first character that differs
        raise Differs(f"note from character {start}: {old[start:start + 90]!r} (before) != {notes[1][start:start + 90]!r}")
    if [str(t) for t in a.dtypes] != [str(t) for t in b.dtypes]:
        raise Differs(f"column types {a.dtypes} (before) != {b.dtypes}")
    a_rows = [[_comparable(renames.value(v)) for v in row] for row in a.rows()]
    b_rows = [[_comparable(v) for v in row] for row in b.rows()]
    return _rows_compare([renames.text(c) for c in a.columns], a_rows, b.columns, b_rows, "table")


def _csv(before: Path, after: Path, renames: Renames) -> str:
    a, b = (list(csv.reader(io.StringIO(path.read_text()))) for path in (before, after))
    if not a or not b:
        return _bytes(before, after, renames)
    a = [[renames.text(cell) for cell in row] for row in a]
    return _rows_compare(a[0], a[1:], b[0], b[1:], "csv")


def _markdown(before: Path, after: Path, renames: Renames) -> str:
    """Lines renamed; the body rows of a table may come in another order."""
    a_lines = [renames.text(line) for line in before.read_text().splitlines()]
    b_lines = after.read_text().splitlines()
    if len(a_lines) != len(b_lines):
        raise Differs(f"{len(a_lines)} lines (before) != {len(b_lines)}")
    if a_lines == b_lines:
        return "same"
    # a table's body: the rows after a |---| line, up to the first line that is not a row
    bodies, start = [], None
    for index, line in enumerate(a_lines + [""]):
        is_row = line.startswith("|") and line.endswith("|")
        if start is not None and not is_row:
            bodies.append((start, index))
            start = None
        if is_row and set(line) <= set("|-: ") and "-" in line:
            start = index + 1
    outside = [i for i in range(len(a_lines)) if not any(s <= i < e for s, e in bodies)]
    if all(a_lines[i] == b_lines[i] for i in outside) and all(sorted(a_lines[s:e]) == sorted(b_lines[s:e]) for s, e in bodies):
        return "reordered"
    first = next(i for i in range(len(a_lines)) if a_lines[i] != b_lines[i])
    raise Differs(f"line {first + 1}: {a_lines[first][:160]!r} (before) != {b_lines[first][:160]!r}")


def _sorted_lists(value):
    if isinstance(value, dict):
        return {k: _sorted_lists(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted((_sorted_lists(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True, default=str))
    return value


_DATASET = re.compile(r"data-[0-9a-f]{32}")


def _dataset_names(value, names: dict[str, str]):
    """A Vega-Lite spec with its datasets' names (Altair's ``data-<md5 of the rows>``) numbered by first appearance."""
    rename = lambda text: _DATASET.sub(lambda m: names.setdefault(m[0], f"data-{len(names)}"), text)  # noqa: E731
    if isinstance(value, dict):
        return {rename(k): _dataset_names(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_dataset_names(v, names) for v in value]
    return rename(value) if isinstance(value, str) else value


def _first_json_difference(a, b, where) -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(set(a) ^ set(b))} differ"
        return next(_first_json_difference(a[k], b[k], f"{where}.{k}") for k in a if a[k] != b[k])
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next(_first_json_difference(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return f"{where}: {json.dumps(a, default=str)[:120]} (before) != {json.dumps(b, default=str)[:120]}"


def _json(before: Path, after: Path, renames: Renames, workdirs: tuple[Path, Path]) -> str:
    a = _comparable(renames.value(normalised_json(json.loads(before.read_text()), str(workdirs[0].resolve()))))
    b = _comparable(normalised_json(json.loads(after.read_text()), str(workdirs[1].resolve())))
    if after.name.endswith(".vl.json"):
        a, b = _dataset_names(a, {}), _dataset_names(b, {})
    if a == b:
        return "same"
    if _sorted_lists(a) == _sorted_lists(b):
        return "reordered"
    raise Differs(_first_json_difference(a, b, "$"))


def _safetensors_parts(path: Path) -> tuple[dict, dict[str, tuple[str, list, bytes]]]:
    """(metadata, name -> (dtype, shape, raw bytes)) of a Safetensors file, read from its header (no torch)."""
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    metadata = header.pop("__metadata__", None) or {}
    body = data[8 + size:]
    return metadata, {name: (info["dtype"], info["shape"], body[info["data_offsets"][0]:info["data_offsets"][1]])
                      for name, info in header.items()}


def _safetensors(before: Path, after: Path, renames: Renames) -> str:
    (meta_a, a), (meta_b, b) = _safetensors_parts(before), _safetensors_parts(after)
    if a.keys() != b.keys():
        raise Differs(f"tensors {sorted(set(a) ^ set(b))} differ")
    unequal = [name for name in a if a[name] != b[name]]
    if unequal:
        raise Differs(f"tensor {unequal[0]} differs ({len(unequal)} in all)")
    if renames.value(meta_a) != meta_b:
        raise Differs(f"metadata {renames.value(meta_a)} (before) != {meta_b}")
    return "same"


def _bytes(before: Path, after: Path, renames: Renames) -> str:
    a, b = before.read_bytes(), after.read_bytes()
    if a == b:
        return "same"
    try:
        if renames.text(a.decode("utf-8")) == b.decode("utf-8"):
            return "same"
    except UnicodeDecodeError:
        pass
    raise Differs("bytes differ" + ("" if len(a) == len(b) else f" ({len(a)} bytes before, {len(b)} after)"))


def compare_file(before: Path, after: Path, renames: Renames, workdirs: tuple[Path, Path], spec_same: bool) -> str:
    """How ``after`` relates to ``before`` (IDENTICAL, SAME_VALUES, REORDERED or REDRAWN); raises :class:`Differs`.
    ``spec_same``: the Vega-Lite spec this file is drawn from has the same values in both runs."""
    if before.read_bytes() == after.read_bytes():
        return IDENTICAL
    suffix = ".vl.json" if after.name.endswith(".vl.json") else after.suffix
    compare = {".parquet": lambda: _parquet(before, after, renames), ".csv": lambda: _csv(before, after, renames),
               ".md": lambda: _markdown(before, after, renames), ".json": lambda: _json(before, after, renames, workdirs),
               ".vl.json": lambda: _json(before, after, renames, workdirs),
               ".safetensors": lambda: _safetensors(before, after, renames)}.get(suffix, lambda: _bytes(before, after, renames))
    try:
        outcome = compare()
    except Differs:
        if spec_same and after.suffix in DRAWINGS:  # a drawing renders pixels and ids its own way: its spec decides
            return REDRAWN
        raise
    return REORDERED if outcome == "reordered" else SAME_VALUES


# --- comparing two folders -------------------------------------------------------------------------------------------


def result_files(results: Path, ignore: list[str] = ()) -> dict[str, Path]:
    """Relative path -> file, for every result file that should be identical across equal runs (as the tests'
    ``workflow_utils.result_files``), less those ``ignore`` matches."""
    files = {}
    for path in sorted(results.rglob("*")):
        relative = path.relative_to(results)
        if (path.is_file() and relative.parts[0] not in VOLATILE_DIRS and path.name not in VOLATILE_FILES
                and not path.name.startswith("screenshot")  # the browser test's screenshots of the page
                and not any(fnmatch.fnmatch(str(relative), pattern) for pattern in ignore)):
            files[relative.as_posix()] = path
    return files


class Comparison:
    """What :func:`compare` found: each compared file's outcome, the files that differ and those in one run only."""

    def __init__(self):
        self.outcomes: dict[str, str] = {}  # path in the run after -> outcome
        self.differing: dict[str, str] = {}  # path in the run after -> the first difference
        self.before_only: list[str] = []  # paths of the run before (as the run after would name them)
        self.after_only: list[str] = []
        self.renamed = 0  # files of the run before under a renamed path

    @property
    def ok(self) -> bool:
        return not (self.differing or self.before_only or self.after_only)


def compare(before: Path, after: Path, renames: Renames | None = None, ignore: list[str] = ()) -> Comparison:
    renames = renames or Renames()
    for folder in (before, after):
        if not folder.is_dir():
            raise SystemExit(f"{folder}: not a folder (give the 'results' folder of each run)")
    before_files, after_files = result_files(before, ignore), result_files(after, ignore)
    mapped = {renames.path(relative): path for relative, path in before_files.items()}
    result = Comparison()
    result.renamed = sum(1 for relative in before_files if renames.path(relative) != relative)
    result.before_only = sorted(set(mapped) - set(after_files))
    result.after_only = sorted(set(after_files) - set(mapped))
    specs: set[str] = set()  # stems of the figures whose spec has the same values
    for relative in sorted(set(mapped) & set(after_files), key=lambda p: (not p.endswith(".vl.json"), p)):  # specs first
        stem = relative.removesuffix(Path(relative).suffix)
        try:
            outcome = compare_file(mapped[relative], after_files[relative], renames, (before.parent, after.parent),
                                   stem in specs)
        except Differs as error:
            result.differing[relative] = str(error)
            continue
        if relative.endswith(".vl.json"):
            specs.add(relative.removesuffix(".vl.json"))
        result.outcomes[relative] = outcome
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="results folder of the run before the change")
    parser.add_argument("after", type=Path, help="results folder of the run after it")
    parser.add_argument("--rename", type=Renames.parse, action="append", default=[], metavar="OLD=NEW",
                        help="a path prefix (under results/) the change renamed; repeatable")
    parser.add_argument("--respell", type=Renames.parse_respelling, action="append", default=[], metavar="REGEX=REPLACEMENT",
                        help="a name spelt anew: re.sub on the run before's paths and strings (repeatable)")
    parser.add_argument("--ignore", action="append", default=[], metavar="GLOB",
                        help="also leave out the files this pattern matches (relative to results/); repeatable")
    parser.add_argument("--show", type=int, default=20, help="files to print per list (default 20)")
    parser.add_argument("--list", action="store_true", help="also print every compared file that is not byte-identical")
    args = parser.parse_args(argv)
    result = compare(args.before, args.after, Renames(args.rename, args.respell), args.ignore)

    def show(title: str, lines: list[str]) -> None:
        if lines:
            print(f"  {len(lines):4d} {title}:")
            for line in lines[: args.show]:
                print(f"       {line}")
            if len(lines) > args.show:
                print(f"       ... and {len(lines) - args.show} more")

    if args.list:
        for relative, outcome in sorted(result.outcomes.items()):
            if outcome != IDENTICAL:
                print(f"{outcome}: {relative}")
    counts = Counter(result.outcomes.values())
    left_out = [f"folders {', '.join(sorted(VOLATILE_DIRS))}", f"files {', '.join(sorted(VOLATILE_FILES))}",
                f"JSON keys {', '.join(sorted(VOLATILE_KEYS))} and timings", *args.ignore]
    print(f"{len(result.outcomes) + len(result.differing)} result files compared, {result.renamed} of them under a "
          f"renamed path (left out: {'; '.join(left_out)})")
    for kind in (IDENTICAL, SAME_VALUES, REORDERED, REDRAWN):
        print(f"  {counts[kind]:4d} {kind}")
    show("DIFFERENT", [f"{path}: {difference}" for path, difference in sorted(result.differing.items())])
    show("in the run before only", result.before_only)
    show("in the run after only", result.after_only)
    if not result.ok:
        return 1
    print(f"every result file has the same values in both runs ({len(result.outcomes)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
