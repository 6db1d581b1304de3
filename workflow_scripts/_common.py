"""What every workflow script does first: put the workflow's own code on the import path, send stderr and logging
to the job's log file, and have the job's CPU seconds and peak memory written there as it exits
(:mod:`bertology_core.workflow.job_record`)."""

import logging
import os
import sys
from pathlib import Path

# bertology_core is imported from the workflow's folder, not from an installed copy: a conda environment built by
# --use-conda holds the third-party packages only, and a checkout runs its own code wherever it is installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def log_to(path: str) -> None:
    handle = open(path, "w", buffering=1)  # noqa: SIM115 - lives as long as the job
    sys.stderr = handle
    logging.basicConfig(stream=handle, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True)
    from bertology_core.workflow import job_record

    job_record.write_at_exit(handle)
    # where the job's Hugging Face libraries may fetch from (a cluster job: never, rules/common.smk)
    logging.info("Hugging Face Hub: %s", "offline" if os.environ.get("HF_HUB_OFFLINE") == "1" else "online")
