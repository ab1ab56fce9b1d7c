"""Keep the memory TensorFlow frees for the next step instead of handing it back to the kernel.

A training step allocates and frees hundreds of MiB of tensors. With
glibc's default settings much of that goes back to the kernel when it is
freed (large blocks are unmapped, per-thread heaps are shrunk or deleted)
and is faulted in again, page by zeroed page, in the next step. Three
`mallopt` settings stop the round trip (blocks over 32 MiB still get their
own mapping: glibc allows no higher threshold). The price is memory: freed
memory is kept for reuse rather than returned, so the process holds on to
its peak until it exits, and fragmentation raises that peak a little.
docs/performance.md has the page faults, times and peaks measured.
"""
import ctypes
import sys

# mallopt parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

# Blocks up to this size come from the heaps, not from their own mapping
# (glibc's largest accepted value on 64-bit: half a per-thread heap).
MMAP_THRESHOLD_BYTES = 32 * 2 ** 20
# Free memory at the top of a heap is kept up to this size...
TRIM_THRESHOLD_BYTES = 2 ** 30
# ...and a per-thread heap keeps this much slack, so that it is never
# deleted only to be mapped again (a per-thread heap is at most 64 MiB).
TOP_PAD_BYTES = 64 * 2 ** 20


def keep_freed_memory():
    """Sets glibc's malloc to keep freed memory in the process for reuse.

    Process-wide and idempotent; `train(..., tune_malloc=True)` calls it
    (the training scripts ask for that). Call it yourself before a training
    loop of your own. Elsewhere than Linux with
    glibc it does nothing. Evaluation and embedding fault little, so they
    leave glibc alone.

    Returns:
        True if the settings were applied.
    """
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    settings = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
                (_M_TOP_PAD, TOP_PAD_BYTES))
    # mallopt returns 1 on success.
    return all([mallopt(parameter, value) == 1 for parameter, value in settings])


def _glibc_mallopt():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc only: other C libraries read these numbers differently
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt
