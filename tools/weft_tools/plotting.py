"""matplotlib for the tools: the Agg backend (files only, no display), chosen before pyplot is imported."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (must follow the backend choice)

# One colour and marker per system, stable across figures of one run.
_MARKERS = "os^vD<>ph*Xd"


def style(index: int) -> dict:
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {"color": colours[index % len(colours)], "marker": _MARKERS[index % len(_MARKERS)]}


def save(fig, path: str, dpi: int = 120) -> None:
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
