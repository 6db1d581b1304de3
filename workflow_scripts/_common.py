"""What every workflow script does first: send stderr and logging to the job's log file."""

import logging
import sys


def log_to(path: str) -> None:
    handle = open(path, "w", buffering=1)  # noqa: SIM115 - lives as long as the job
    sys.stderr = handle
    logging.basicConfig(stream=handle, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True)
