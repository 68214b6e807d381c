"""Fresh arrays that do not fault page by page (issue 22).

A large new array is faulted in (and zeroed by the kernel) one 4 KiB page
at a time on its first write; on this project's 2-vCPU VM that is 0.3-1.4
GB/s, slower than the network stream filling it. ``fresh_array`` maps
private anonymous memory 2 MiB aligned and asks for transparent huge pages
(``madvise(MADV_HUGEPAGE)``), so each first write faults 2 MiB at once where
the kernel's THP mode is ``always`` or ``madvise``. Where it is ``never`` (or
the platform has no ``MADV_HUGEPAGE``) the array is plain memory: correct,
only slower to touch the first time. The C++ side of the same idea is
``memory/fresh_memory.h``.
"""

from __future__ import annotations

import ctypes
import mmap

import numpy as np

HUGE_PAGE_BYTES = 2 << 20


def fresh_array(count: int, dtype: np.typing.DTypeLike) -> np.ndarray:
    """A new, zero-filled, writable 1-D array of ``count`` elements.

    At least two huge pages: backed by its own anonymous mapping with huge
    pages asked for (unmapped when the array is freed); smaller: ``np.empty``.
    """
    wire = np.dtype(dtype)
    nbytes = count * wire.itemsize
    advise = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < 2 * HUGE_PAGE_BYTES or advise is None:
        return np.empty(count, wire)
    # Private: a shared anonymous mapping is shmem, where THP is usually off.
    buffer = mmap.mmap(-1, nbytes + HUGE_PAGE_BYTES,
                       flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
    view = ctypes.c_char.from_buffer(buffer)
    address = ctypes.addressof(view)
    del view  # Releases the export, so the mapping can go with the array.
    start = -address % HUGE_PAGE_BYTES
    try:
        buffer.madvise(advise, start, nbytes)
    except OSError:
        pass  # No THP in this kernel: plain pages.
    return np.frombuffer(buffer, dtype=wire, count=count, offset=start)
