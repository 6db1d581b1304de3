"""Rename the former model-state names in hand-label files and label cards (bertology_core/states.py).

Label files name each map's dumped state in their ``state`` column; before the one vocabulary of model states
these were ``untuned`` (the pre-trained encoder, now ``pretrained``), ``pretrained_seed<N>`` (fine-tuned from the
pre-trained weights, now ``finetuned_seed<N>``) and ``random_seed<N>`` (fine-tuned from random weights, now
``scratch_seed<N>``). A label card's ``states`` names fine-tuned dumps the same way (``MRPC/pretrained_seed1`` ->
``MRPC/finetuned_seed1``; its recipe fingerprints stay valid, see pattern_labels.recipe_fingerprint).

Only those names change: every other byte of a file is kept (other columns, line endings, a card's text and
layout). Running it again changes nothing.

    python tools/migrate_state_names.py data/pattern_labels            # every *.csv and *.json there
    python tools/migrate_state_names.py my_labels.csv my_card.json     # single files
    python tools/migrate_state_names.py --check data/pattern_labels    # exit 1 if anything still needs renaming
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertology_core import states  # noqa: E402


def migrate_csv(text: str) -> tuple[str, int]:
    """``text`` with the former names of its ``state`` column renamed, and how many values were renamed."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return text, 0
    header = next(csv.reader([lines[0]]))
    if "state" not in header:
        return text, 0
    column, renamed, out = header.index("state"), 0, [lines[0]]
    for line in lines[1:]:
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        fields = next(csv.reader([body]), [])
        new = states.former_dumped(fields[column].strip()) if len(fields) > column else None
        if new is None:
            out.append(line)
            continue
        renamed += 1
        fields[column] = new
        if ",".join(next(csv.reader([body]))) == body:  # no quoting: the same line with one field changed
            out.append(",".join(fields) + ending)
        else:
            buffer = io.StringIO()
            csv.writer(buffer, lineterminator="").writerow(fields)
            out.append(buffer.getvalue() + ending)
    return "".join(out), renamed


def migrate_card(text: str) -> tuple[str, int]:
    """A label card's text with the former names of its ``states`` keys renamed (the rest of the text kept)."""
    card = json.loads(text)
    if not isinstance(card, dict) or "model_spec" not in card:
        return text, 0
    renamed = 0
    for key in list(card.get("states") or {}):
        prefix, _, dumped = key.rpartition("/")
        new = states.former_dumped(dumped)
        if new is None:
            continue
        old_text, new_text = json.dumps(key) + ":", json.dumps(f"{prefix}/{new}" if prefix else new) + ":"
        if text.count(old_text) != 1:
            raise SystemExit(f"cannot rename {key!r} in place: {old_text} occurs {text.count(old_text)} times")
        text = text.replace(old_text, new_text)
        renamed += 1
    return text, renamed


def files(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.iterdir() if p.suffix in (".csv", ".json"))
        elif path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"{path}: no such file or folder")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="label files, cards or folders holding them")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file still uses a former name")
    args = parser.parse_args(argv)
    pending = 0
    for path in files(args.paths):
        text = path.read_bytes().decode("utf-8")  # bytes: line endings kept as they are
        new_text, renamed = (migrate_card if path.suffix == ".json" else migrate_csv)(text)
        if not renamed:
            continue
        pending += 1
        print(f"{path}: {renamed} state name(s) {'to rename' if args.check else 'renamed'}")
        if not args.check:
            path.write_bytes(new_text.encode("utf-8"))
    if not pending:
        print("no former state names found")
    return 1 if args.check and pending else 0


if __name__ == "__main__":
    sys.exit(main())
