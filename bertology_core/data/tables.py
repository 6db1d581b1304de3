"""Building long tables without Python lists of their rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl


def repeated(values: Sequence[Any], times: int, dtype: pl.DataType) -> pl.Series:
    """Each of ``values`` (one per configuration, None allowed) ``times`` times in a row, as a ``dtype`` column
    gathered from the short list: a sweep's configurations x examples table has millions of rows at full dev (QQP's
    head sweep: 6.35M), which a Python list would hold as millions of objects."""
    return pl.Series(values, dtype=dtype).gather(np.repeat(np.arange(len(values), dtype=np.uint32), times))
