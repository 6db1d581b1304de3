"""Integration tests on the real data in ../shared/data and the installed all-MiniLM-L6-v2.

Skipped, with the reason, where either is absent.
"""

from __future__ import annotations

import numpy as np
import pytest

from bertology_core.data import tasks
from bertology_core.finetune import training

pytestmark = pytest.mark.integration

# (task, split) -> (rows, label counts by id) as documented in shared/data/SOURCES.md
EXPECTED = {
    ("MRPC", "train"): (3668, {1: 2474, 0: 1194}),
    ("MRPC", "dev"): (408, {1: 279, 0: 129}),
    ("RTE", "train"): (2490, {0: 1249, 1: 1241}),
    ("RTE", "dev"): (277, {0: 146, 1: 131}),
    ("STS-B", "train"): (5749, None),
    ("STS-B", "dev"): (1500, None),
    ("SST-2", "train"): (67349, {1: 37569, 0: 29780}),
    ("SST-2", "dev"): (872, {1: 444, 0: 428}),
    ("CoLA", "train"): (8551, {1: 6023, 0: 2528}),
    ("CoLA", "dev"): (1043, {1: 721, 0: 322}),
    ("WNLI", "train"): (635, {0: 323, 1: 312}),
    ("WNLI", "dev"): (71, {0: 40, 1: 31}),
    ("QNLI", "dev"): (5463, {0: 2702, 1: 2761}),
}


@pytest.mark.parametrize(("task", "split"), sorted(EXPECTED))
def test_real_glue_files_parse_with_documented_counts(shared_glue, task, split):
    declared = tasks.glue_task(task, shared_glue)
    if not declared.files.path(split).is_file():
        pytest.skip(f"{task}/{split} is not in {shared_glue}")
    frame = tasks.read_files(declared, split)
    rows, counts = EXPECTED[(task, split)]
    assert frame.height == rows
    assert frame["sentence1"].null_count() == 0 and (frame["sentence1"].str.len_chars() > 0).all()
    if counts is not None:
        assert dict(frame["label"].value_counts().iter_rows()) == counts
    else:
        assert 0 <= frame["label"].min() and frame["label"].max() <= 5


def test_mrpc_first_row_text_is_intact(shared_glue):
    frame = tasks.read_files(tasks.glue_task("MRPC", shared_glue), "train")
    assert frame["sentence1"][0].startswith("Amrozi accused his brother")
    assert '" the witness "' in frame["sentence1"][0]  # quotes kept verbatim (QUOTE_NONE)


def test_minilm_fine_tunes_on_real_mrpc_deterministically(shared_glue, minilm_path):
    task = tasks.glue_task("MRPC", shared_glue)
    train = tasks.prepare_split(task, "train", task.files, 64, 0)
    dev = tasks.prepare_split(task, "dev", task.files, 32, 0)
    config = training.FinetuneConfig(batch_size=16, epochs=1, learning_rate=5e-5, group_by_length=True)
    runs = [
        training.finetune_and_evaluate(str(minilm_path), task, "finetuned", 3, train, {"dev": dev}, config, progress=False)
        for _ in range(2)
    ]
    assert runs[0].metrics["training"]["steps"] == 4
    assert runs[0].metrics["eval"]["dev"] == {**runs[1].metrics["eval"]["dev"], "eval_seconds": runs[0].metrics["eval"]["dev"]["eval_seconds"]}
    assert runs[0].predictions["dev"].equals(runs[1].predictions["dev"])
    logits = np.stack(runs[0].predictions["dev"]["logits"].to_list())
    assert logits.shape == (32, 2) and np.isfinite(logits).all()
