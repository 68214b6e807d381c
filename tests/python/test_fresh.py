"""summon.fresh: read results in fresh memory with huge pages asked for."""

import numpy as np

from summon.fresh import HUGE_PAGE_BYTES, fresh_array


def test_a_large_array_is_zero_writable_and_two_mib_aligned() -> None:
    count = (5 * HUGE_PAGE_BYTES) // 4 + 3
    array = fresh_array(count, np.float32)
    assert array.dtype == np.float32 and array.shape == (count,)
    assert array.flags["C_CONTIGUOUS"] and array.flags["WRITEABLE"]
    assert array.ctypes.data % HUGE_PAGE_BYTES == 0
    assert not array.any()
    array[:] = np.arange(count, dtype=np.float32)
    assert array[count - 1] == np.float32(count - 1)


def test_a_small_array_is_plain_numpy() -> None:
    array = fresh_array(100, np.uint16)
    assert array.shape == (100,) and array.dtype == np.uint16
    array[99] = 7
    assert array[99] == 7


def test_the_mapping_lives_as_long_as_a_view_of_it() -> None:
    view = fresh_array(4 * HUGE_PAGE_BYTES, np.uint8)[10:20]
    view[:] = 3
    assert view.sum() == 30
