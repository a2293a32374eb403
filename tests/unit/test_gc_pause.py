"""``gc_paused`` pauses the cyclic collector for the block only, nested or not, and never turns
on a collector its caller had turned off."""

from __future__ import annotations

import gc

import pytest

from neuron_profiler.gc_pause import gc_paused


def test_paused_inside_restored_after_even_on_error() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block did not turn it back on
    assert gc.isenabled()
    with pytest.raises(KeyError), gc_paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
