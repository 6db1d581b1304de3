"""Safetensors files read and written through numpy memory maps: a job holds what it touches of a large file (a
layer of word features, a batch of words), not the whole of it.

The format (https://github.com/huggingface/safetensors#format): an 8-byte little-endian header size N, N bytes of
JSON (each tensor's ``dtype``, ``shape`` and ``data_offsets`` [begin, end) relative to the data, and an optional
``__metadata__`` of strings), then the tensors' bytes, little-endian, C order, without holes. safetensors' own numpy
API reads a whole file into memory (``safetensors.numpy.load_file``) or copies each tensor it is asked for
(``safe_open``); the files written here are read by either.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from bertology_core.data import io

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "I16": np.int16,
          "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
NAMES = {np.dtype(dtype): name for name, dtype in DTYPES.items()}


def read_mapped(path: str | os.PathLike[str]) -> tuple[dict[str, np.memmap], dict[str, str]]:
    """Every tensor of the safetensors file ``path`` as a read-only memory map (nothing is read until used), and
    its metadata. Raises ValueError naming the file where it is not a safetensors file of these dtypes."""
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise ValueError(f"{path}: {size} bytes, not a safetensors file (no header). Fix: rerun the job that wrote it.")
        (header_size,) = struct.unpack("<Q", prefix)
        if header_size > size - 8:
            raise ValueError(f"{path}: a header of {header_size} bytes in a file of {size}: not a safetensors file or "
                             "truncated. Fix: rerun the job that wrote it.")
        try:
            header = json.loads(handle.read(header_size))
        except ValueError as error:
            raise ValueError(f"{path}: its header is not JSON ({error}): not a safetensors file. Fix: rerun the job that wrote it.") from None
    start = 8 + header_size
    metadata = header.pop("__metadata__", None) or {}
    tensors: dict[str, np.memmap] = {}
    for name, entry in header.items():
        if entry["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor {name} is {entry['dtype']}, which numpy cannot map (mapped: {', '.join(DTYPES)})")
        dtype, shape = np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<"), tuple(entry["shape"])
        begin, end = entry["data_offsets"]
        if end - begin != dtype.itemsize * int(np.prod(shape)) or start + end > size:
            raise ValueError(f"{path}: tensor {name}'s offsets {begin}..{end} do not hold a {entry['dtype']} {list(shape)} "
                             f"in a file of {size} bytes: truncated? Fix: rerun the job that wrote it.")
        if int(np.prod(shape)) == 0:
            tensors[name] = np.zeros(shape, dtype)  # numpy maps no empty region
        else:
            tensors[name] = np.memmap(path, dtype=dtype, mode="r", offset=start + begin, shape=shape)
    return tensors, metadata


@contextlib.contextmanager
def write_mapped(path: str | os.PathLike[str], specs: Mapping[str, tuple[tuple[int, ...], np.dtype | type]],
                 metadata: Mapping[str, str] | None = None) -> Iterator[dict[str, np.ndarray]]:
    """A safetensors file at ``path`` holding tensors of ``specs`` (name -> shape, dtype; stored widest dtype first),
    which the block fills through writable memory maps; written to a temporary path and renamed onto ``path`` when the
    block ends without error (:func:`bertology_core.data.io.atomic_path`). What the block has not written is zeros. The
    file's space is reserved first: a full disk fails here, not as a SIGBUS in the middle of writing through the map."""
    if metadata and not all(isinstance(key, str) and isinstance(value, str) for key, value in metadata.items()):
        raise TypeError(f"safetensors metadata is strings to strings, not {dict(metadata)!r}")
    entries, offset = {}, 0
    # wider dtypes first, as safetensors' own writer orders them, so that every tensor starts aligned to its dtype
    for name, (shape, dtype) in sorted(specs.items(), key=lambda item: -np.dtype(item[1][1]).itemsize):
        dtype = np.dtype(dtype)
        if dtype not in NAMES:
            raise ValueError(f"tensor {name}: dtype {dtype} has no safetensors name here ({', '.join(DTYPES)})")
        nbytes = dtype.itemsize * int(np.prod(shape))
        entries[name] = {"dtype": NAMES[dtype], "shape": [int(s) for s in shape], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header = json.dumps({**({"__metadata__": dict(metadata)} if metadata else {}), **entries}, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)  # the data 8-byte aligned, as safetensors pads it
    with io.atomic_path(path) as tmp:
        with tmp.open("wb") as handle:
            handle.write(struct.pack("<Q", len(header)) + header)
            handle.flush()
            os.posix_fallocate(handle.fileno(), 0, 8 + len(header) + offset)
        maps = {name: (np.memmap(tmp, dtype=np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<"), mode="r+",
                                 offset=8 + len(header) + entry["data_offsets"][0], shape=tuple(entry["shape"]))
                       if entry["data_offsets"][1] > entry["data_offsets"][0] else np.zeros(entry["shape"], DTYPES[entry["dtype"]]))
                for name, entry in entries.items()}
        yield maps
        for array in maps.values():
            if isinstance(array, np.memmap):
                array.flush()
        del maps


def _mapping(array: np.ndarray) -> mmap.mmap | None:
    base = array
    while base is not None and not isinstance(base, mmap.mmap):  # a map's view -> the map -> its mmap
        base = getattr(base, "base", None)
    return base if isinstance(base, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED") else None


def release(array: np.ndarray) -> None:
    """Drop the pages of a memory-mapped ``array`` from this process's resident memory (the kernel keeps them in its
    page cache while it has room): what a job has read through a map otherwise counts in its resident size (and in
    what a cluster's memory accounting may kill it for) until the job ends. A no-op for an array that is not a map."""
    found = _mapping(array)
    if found is not None:
        _release_mapping(found)


def _release_mapping(found: mmap.mmap) -> None:
    found.madvise(mmap.MADV_DONTNEED)


# bytes gathered from a map between releases: a page fault maps more of the page cache than the page it asks for
# (Linux's fault-around, large folios), so a few random gathers map much of a file: here one gather of 256 rows of 1 kB
# mapped 155 MB of a 234 MB file
RELEASE_EVERY = 8 << 20
_gathered: dict[int, int] = {}


def touched(array: np.ndarray, nbytes: int) -> None:
    """Count ``nbytes`` just gathered from ``array``; past :data:`RELEASE_EVERY` since the last release, release its
    map's pages (:func:`release`). A no-op for an array that is not a map."""
    found = _mapping(array)
    if found is None:
        return
    total = _gathered.get(id(found), 0) + nbytes
    if total >= RELEASE_EVERY:
        _release_mapping(found)
        total = 0
    _gathered[id(found)] = total
