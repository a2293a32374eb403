"""What every view of the report draws the same way, defined once: the colour of each idle cause
and the text limits of ``reports.text``. The HTML report colours its charts from
``CAUSE_COLOURS``; the TensorBoard plugin serves ``style_document()`` (route ``style``) and its
page draws and shortens with what it gets, so the two never disagree.

The causes' colours stay clear of the busy series the HTML report stacks them on (compute
blue, collectives cyan, DMA green).
"""

from __future__ import annotations

from typing import Any

from neuron_profiler.reports.text import ELLIPSIS, NAME_LIMIT, TEXT_LIMIT

CAUSE_COLOURS: dict[str, str] = {  # one per analysis.causes.ALL_CAUSES (tested)
    "collective_wait": "#393b79",
    "data_loading": "#d62728",
    "cpu_fallback": "#ff7f0e",
    "host_sync": "#9467bd",
    "host_bound_launch": "#e377c2",
    "profiler_overhead": "#8c564b",
    "other": "#bcbd22",
    "short_gaps": "#c7c7c7",
}
EMULATOR_OVERHEAD_COLOUR = "#7f7f7f"  # the emulator's own host work: in no cause


def style_document() -> dict[str, Any]:
    """The palette and text limits as the TensorBoard page reads them (route ``style``)."""
    return {
        "cause_colours": dict(CAUSE_COLOURS),
        "emulator_overhead_colour": EMULATOR_OVERHEAD_COLOUR,
        "name_limit": NAME_LIMIT,
        "text_limit": TEXT_LIMIT,
        "ellipsis": ELLIPSIS,
    }
