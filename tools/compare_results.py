"""Check that two results folders, made before and after the model states were renamed (bertology_core/data/states.py),
are identical apart from the renames.

    python tools/compare_results.py OLD_RESULTS_DIR NEW_RESULTS_DIR [--show N]

Every result file of the old run is mapped to its new path and its contents to the new names, then compared with the
new run's file; the new run must hold no other file. The renames it undoes:

- paths: ``finetune/<model>/<task>/{untuned,pretrained,random}/`` -> ``{pretrained,finetuned,scratch}`` (also
  ``disabling/.../<init>/`` and ``pruning/.../pretrained/``), dump files ``{untuned,pretrained_seedN,random_seedN}.*``
  -> ``{pretrained,finetuned_seedN,scratch_seedN}.*`` (attention, patterns, linguistic), ``probing/<model>/{untuned,
  random}/`` -> ``{pretrained,random_weights}/``;
- values: a table's or record's ``init`` column or key becomes ``state`` with the new fine-tuning names; a probing
  ``state`` of ``random`` becomes ``random_weights`` (also in the probing caption's list of states); in every other string (cells, JSON, Markdown and CSV text,
  HTML) the former dump names and paths above; the baselines table's column titles become the states' labels
  (``pre-trained (untuned)`` -> ``pre-trained``, ``random init + fine-tuned`` -> ``from scratch``, ``random init: fit
  for analysis`` -> ``from scratch: fit for analysis``).

Files that differ between any two runs of one config are left out as the tests leave them out
(tests/workflow_utils.py: VOLATILE_DIRS, VOLATILE_FILES, VOLATILE_KEYS, timings in JSON, the run's own folder).
Parquet and CSV tables are compared cell by cell (in another row order too, when sorting by a renamed value moved
rows: reported as such), JSON records as data, weights tensor by tensor, everything else byte for byte. A figure's
PNG, SVG and HTML are rendered from its Vega-Lite spec (``.vl.json``, compared with Altair's dataset names, hashes
of the rows, numbered instead): when the spec is identical apart from the renames, the drawings are accepted even where renamed labels moved pixels (reported as such); otherwise they must be
identical apart from the renames too.

Prints a summary (files compared, renamed, identical, identical apart from renamed values, ...) and every difference;
exits 1 on any difference, 0 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from bertology_core.data import states  # noqa: E402
from workflow_utils import VOLATILE_KEYS, _normalised_json, result_files  # noqa: E402

FINE_TUNING = states.FORMER_FINE_TUNING
PROBED = states.FORMER_PROBED
# the baselines table's former column titles -> the states' labels
TITLES = {
    "pre-trained (untuned)": states.label(states.PRETRAINED),
    "random init + fine-tuned": states.label(states.SCRATCH),
    "random init: fit for analysis": f"{states.label(states.SCRATCH)}: fit for analysis",
}
_SEGMENT = r"[^/\s\"'|,]+"
_TEXT = re.compile(
    "|".join(
        [
            "(?P<title>" + "|".join(re.escape(title) for title in TITLES) + ")",
            # the probing figure's caption lists the probed states: "states: untuned, random, MRPC_seed1."
            r"(?P<list_start>\bstates: )(?P<list>[^.\n\"]*)",
            rf"(?P<run>(?:finetune|disabling|pruning)/{_SEGMENT}/{_SEGMENT}/)(?P<init>{'|'.join(FINE_TUNING)})(?=/)",
            rf"(?P<probe>probing/{_SEGMENT}/)(?P<probed>{'|'.join(PROBED)})(?=/)",
            r"\b(?P<seeded>(?:pretrained|random)_seed\d+)",
            r"\b(?P<rule>evaluate_)?(?P<untuned>untuned)\b",
        ]
    )
)


def _replace(match: re.Match) -> str:
    if match["title"]:
        return TITLES[match["title"]]
    if match["list_start"]:
        return match["list_start"] + ", ".join(PROBED.get(item, new_text(item)) for item in match["list"].split(", "))
    if match["init"]:
        return match["run"] + FINE_TUNING[match["init"]]
    if match["probed"]:
        return match["probe"] + PROBED[match["probed"]]
    if match["seeded"]:
        return states.former_dumped(match["seeded"])
    return (match["rule"] or "") + states.PRETRAINED


def new_text(text: str) -> str:
    """Any text of the old run with the former names, paths and column titles renamed, in one pass."""
    return _TEXT.sub(_replace, text)


def new_cell(column: str, value):
    """A table cell or record value of the old run under its (old) column or key name."""
    if not isinstance(value, str):
        return value
    if column == "init":
        return FINE_TUNING.get(value, value)
    if column == "state" and PROBED.get(value) == states.RANDOM_WEIGHTS:  # probing's former random: random weights
        return PROBED[value]
    return new_text(value)


def new_column(column: str) -> str:
    return "state" if column == "init" else new_text(column)


def new_path(relative: str) -> str:
    """A result file's path relative to results/ in the old run -> the new run's."""
    parts = relative.split("/")
    if parts[0] in ("finetune", "disabling", "pruning") and len(parts) > 4:
        parts[3] = FINE_TUNING.get(parts[3], parts[3])
    elif parts[0] == "probing" and len(parts) > 3:
        parts[2] = PROBED.get(parts[2], parts[2])
    elif parts[0] in ("attention", "patterns", "linguistic"):
        stem, dot, rest = parts[-1].partition(".")
        parts[-1] = (states.former_dumped(stem) or stem) + dot + rest
    return "/".join(parts)


# --- comparing one file ----------------------------------------------------------------------------------------------

IDENTICAL, RENAMED_VALUES, REORDERED, RERENDERED = ("identical", "identical apart from renamed values",
                                                     "identical apart from renamed values and row order",
                                                     "rendered from a spec identical apart from renames")


class Differs(Exception):
    """The two files differ beyond the renames (the message says where)."""


def _rows_compare(old_header, old_rows, new_header, new_rows, where) -> str:
    """Tables as header and rows of cells; old ones already mapped."""
    if old_header != new_header:
        raise Differs(f"{where}: columns {old_header} (old, renamed) != {new_header}")
    if len(old_rows) != len(new_rows):
        raise Differs(f"{where}: {len(old_rows)} rows (old) != {len(new_rows)}")
    if old_rows == new_rows:
        return "same"
    key = lambda row: json.dumps(row, default=str, sort_keys=True)  # noqa: E731
    if sorted(old_rows, key=key) == sorted(new_rows, key=key):
        return "reordered"
    for index, (a, b) in enumerate(zip(old_rows, new_rows)):
        if a != b:
            cells = [f"column {new_header[c]!r}: {x!r} -> {y!r}" for c, (x, y) in enumerate(zip(a, b)) if x != y]
            raise Differs(f"{where}: row {index + 1}: " + "; ".join(cells[:3]))
    raise Differs(f"{where}: rows differ")


def _comparable(value):
    """NaN equals NaN here, as in polars' DataFrame.equals (the tests' comparison)."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    return value


def _parquet(old: Path, new: Path) -> str:
    import polars as pl

    a, b = pl.read_parquet(old), pl.read_parquet(new)
    a_header = [new_column(c) for c in a.columns]
    a_rows = [[_comparable(new_cell(c, v)) for c, v in zip(a.columns, row)] for row in a.rows()]
    if [str(t) for t in a.dtypes] != [str(t) for t in b.dtypes]:
        raise Differs(f"column types {a.dtypes} (old) != {b.dtypes}")
    return _rows_compare(a_header, a_rows, b.columns, [[_comparable(v) for v in row] for row in b.rows()], "table")


def _csv_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _csv(old: Path, new: Path) -> str:
    a, b = _csv_rows(old.read_text()), _csv_rows(new.read_text())
    if not a or not b:
        return _text_equal(old, new)
    header = a[0]
    a_rows = [[new_cell(header[i] if i < len(header) else "", v) for i, v in enumerate(row)] for row in a[1:]]
    return _rows_compare([new_column(c) for c in header], a_rows, b[0], b[1:], "csv")


def _markdown(old: Path, new: Path) -> str:
    """Text lines renamed; a table's cells renamed by their column (its rows may be reordered)."""
    a_lines, b_lines = old.read_text().splitlines(), new.read_text().splitlines()
    if len(a_lines) != len(b_lines):
        raise Differs(f"{len(a_lines)} lines (old) != {len(b_lines)}")
    mapped, header, tables, result = [], None, [], "same"
    for line in a_lines:
        if line.startswith("|") and line.endswith("|"):
            cells = [c.strip() for c in line[1:-1].split("|")]
            if header is None:
                header = cells
                mapped.append("| " + " | ".join(new_column(c) for c in cells) + " |")
                tables.append([len(mapped) - 1, None])
            elif set(line) <= set("|-: "):
                mapped.append(line)
                tables[-1][1] = len(mapped)
            else:
                mapped.append("| " + " | ".join(new_cell(header[i] if i < len(header) else "", c) for i, c in enumerate(cells)) + " |")
        else:
            header = None
            mapped.append(new_text(line))
    if mapped == b_lines:
        return result
    # rows of a table reordered (sorted by a renamed value)?
    starts = [body for _, body in tables if body is not None]
    ends = [next((i for i in range(start, len(mapped)) if not mapped[i].startswith("|")), len(mapped)) for start in starts]
    outside = [i for i in range(len(mapped)) if not any(s <= i < e for s, e in zip(starts, ends))]
    if all(mapped[i] == b_lines[i] for i in outside) and all(
            sorted(mapped[s:e]) == sorted(b_lines[s:e]) for s, e in zip(starts, ends)):
        return "reordered"
    first = next(i for i in range(len(mapped)) if mapped[i] != b_lines[i])
    raise Differs(f"line {first + 1}: {mapped[first][:160]!r} (old, renamed) != {b_lines[first][:160]!r}")


def _json_data(value, key=None):
    if isinstance(value, dict):
        return {new_column(k) if isinstance(k, str) else k: _json_data(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_data(v, key) for v in value]
    return new_cell(key or "", value)


def _sorted_lists(value):
    if isinstance(value, dict):
        return {k: _sorted_lists(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted((_sorted_lists(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True, default=str))
    return value


_DATASET = re.compile(r"data-[0-9a-f]{32}")


def _dataset_names(value, names: dict[str, str]):
    """A Vega-Lite spec with its datasets' names (Altair's ``data-<md5 of the rows>``, which a renamed value changes)
    numbered by first appearance."""
    rename = lambda text: _DATASET.sub(lambda m: names.setdefault(m[0], f"data-{len(names)}"), text)  # noqa: E731
    if isinstance(value, dict):
        return {rename(k): _dataset_names(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_dataset_names(v, names) for v in value]
    return rename(value) if isinstance(value, str) else value


def _json(old: Path, new: Path, old_root: Path, new_root: Path) -> str:
    a = _json_data(_normalised_json(json.loads(old.read_text()), str(old_root.resolve())))
    b = _normalised_json(json.loads(new.read_text()), str(new_root.resolve()))
    if new.name.endswith(".vl.json"):
        a, b = _dataset_names(a, {}), _dataset_names(b, {})
    if a == b:
        return "same"
    if _sorted_lists(a) == _sorted_lists(b):
        return "reordered"
    raise Differs(_first_json_difference(a, b, "$"))


def _first_json_difference(a, b, where) -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(set(a) ^ set(b))} differ"
        return next(_first_json_difference(a[k], b[k], f"{where}.{k}") for k in a if a[k] != b[k])
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next(_first_json_difference(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return f"{where}: {json.dumps(a, default=str)[:120]} (old, renamed) != {json.dumps(b, default=str)[:120]}"


def _safetensors(old: Path, new: Path) -> str:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    a, b = load_file(str(old)), load_file(str(new))
    if a.keys() != b.keys():
        raise Differs(f"tensors {sorted(set(a) ^ set(b))} differ")
    unequal = [name for name in a if not torch.equal(a[name], b[name])]
    if unequal:
        raise Differs(f"tensor {unequal[0]} differs ({len(unequal)} in all)")
    with safe_open(str(old), "pt") as handle_a, safe_open(str(new), "pt") as handle_b:
        meta_a = {new_column(k): new_cell(k, v) for k, v in (handle_a.metadata() or {}).items()}
        if meta_a != (handle_b.metadata() or {}):
            raise Differs(f"metadata {meta_a} (old, renamed) != {handle_b.metadata()}")
    return "same"


def _text_equal(old: Path, new: Path) -> str:
    a, b = old.read_bytes(), new.read_bytes()
    if a == b:
        return "same"
    try:
        if new_text(a.decode("utf-8")) == b.decode("utf-8"):
            return "same"
    except UnicodeDecodeError:
        pass
    raise Differs("bytes differ" + ("" if len(a) == len(b) else f" ({len(a)} bytes old, {len(b)} new)"))


def compare_file(old: Path, new: Path, old_root: Path, new_root: Path, spec_renamed_only: bool) -> str:
    """How ``new`` relates to the old run's ``old`` (IDENTICAL, RENAMED_VALUES, REORDERED or RERENDERED); raises
    :class:`Differs`."""
    if old.read_bytes() == new.read_bytes():
        return IDENTICAL
    suffix = "".join(new.suffixes[-2:]) if new.name.endswith(".vl.json") else new.suffix
    try:
        outcome = {".parquet": lambda: _parquet(old, new), ".csv": lambda: _csv(old, new), ".md": lambda: _markdown(old, new),
                   ".json": lambda: _json(old, new, old_root, new_root), ".vl.json": lambda: _json(old, new, old_root, new_root),
                   ".safetensors": lambda: _safetensors(old, new)}.get(suffix, lambda: _text_equal(old, new))()
    except Differs:
        # a drawing of a spec that differs only by the renames: a longer label moves pixels, a renamed value may take
        # another colour
        if spec_renamed_only and new.suffix in (".png", ".svg", ".html"):
            return RERENDERED
        raise
    return REORDERED if outcome == "reordered" else RENAMED_VALUES


def compare(old_results: Path, new_results: Path, listing: list | None = None) -> tuple[Counter, list[str], int, int]:
    """(outcomes by kind, differences, files compared, files renamed); ``listing`` gets (path, outcome) of each file."""
    for folder in (old_results, new_results):
        if folder.name != "results" or not folder.is_dir():
            raise SystemExit(f"{folder}: not a results folder (the 'results' folder of a run)")
    old_files, new_files = result_files(old_results.parent), result_files(new_results.parent)
    mapped = {new_path(relative): path for relative, path in old_files.items()}
    differences = [f"{path}: in the new run only" for path in sorted(set(new_files) - set(mapped))]
    differences += [f"{path}: in the old run only (as {old})" for path, old in sorted(mapped.items()) if path not in new_files]
    outcomes: Counter = Counter()
    specs: dict[str, bool] = {}
    ordered = sorted(mapped, key=lambda p: (not p.endswith(".vl.json"), p))  # specs first: their drawings depend on them
    for relative in ordered:
        if relative not in new_files:
            continue
        stem = relative.removesuffix(Path(relative).suffix)
        try:
            outcome = compare_file(mapped[relative], new_files[relative], old_results.parent, new_results.parent,
                                   specs.get(stem, False))
            if relative.endswith(".vl.json"):
                specs[relative.removesuffix(".vl.json")] = True
            outcomes[outcome] += 1
            if listing is not None:
                listing.append((relative, outcome))
        except Differs as error:
            differences.append(f"{relative}: {error}")
    renamed = sum(1 for relative in old_files if new_path(relative) != relative)
    return outcomes, differences, len(mapped), renamed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="results folder of the run before the rename")
    parser.add_argument("new", type=Path, help="results folder of the run after it")
    parser.add_argument("--show", type=int, default=20, help="differences to print (default 20)")
    parser.add_argument("--list", action="store_true", help="also print each file that is not byte-identical, and how")
    args = parser.parse_args(argv)
    listing: list = []
    outcomes, differences, compared, renamed = compare(args.old, args.new, listing)
    if args.list:
        for relative, outcome in sorted(listing):
            if outcome != IDENTICAL:
                print(f"{outcome}: {relative}")
    print(f"{compared} result files compared (volatile files left out: {', '.join(sorted(VOLATILE_KEYS))} keys, "
          f"tests/workflow_utils.py's VOLATILE_DIRS and VOLATILE_FILES); {renamed} under a renamed path")
    for kind in (IDENTICAL, RENAMED_VALUES, REORDERED, RERENDERED):
        print(f"  {outcomes[kind]:4d} {kind}")
    if differences:
        print(f"  {len(differences):4d} DIFFERENT beyond the renames:")
        for line in differences[: args.show]:
            print(f"       {line}")
        if len(differences) > args.show:
            print(f"       ... and {len(differences) - args.show} more")
        return 1
    print(f"every result file is identical apart from the renames ({sum(outcomes.values())} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
