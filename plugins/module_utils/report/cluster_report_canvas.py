# -*- coding: utf-8 -*-
# Copyright: YASCO developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The canvas the report's pictures are drawn on, and their PNG bytes: a figure of
a fixed width with margins in inches, the palette, and several pictures stacked
into one.

matplotlib is imported only by the pictures' modules (this one,
cluster_report_render.py and cluster_report_timeline.py), so the rest of the
collection runs without it; MATPLOTLIB_IMPORT_ERROR says why it cannot be. Figures
are drawn on Agg canvases of their own, never through pyplot's global state, and
the PNGs carry no date and no software version: the same report gives the same
bytes.
"""

from __future__ import annotations

import io
import traceback

try:
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.image import imsave
except ImportError:  # reported by the module through missing_required_lib
    MATPLOTLIB_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    MATPLOTLIB_IMPORT_ERROR = None

WIDTH = 12.0  # inches: every picture is as wide, so they stack into one
DPI = 100
# Okabe and Ito's palette, which colour-blind readers tell apart.
COLOURS = {"ha": "#0072B2", "plain": "#009E73", "preemptible": "#E69F00",
           "spare": "#CC79A7", "free": "#F2F2F2", "failed": "#D55E00", "ink": "#222222",
           "grid": "#DDDDDD"}


class Picture:
    """A figure of WIDTH inches and `height`, with fixed margins (in inches), so
    that where things land is known before it is drawn: labels are measured against
    the segments they must fit."""

    def __init__(self, height: float) -> None:
        self.height = height
        self.figure = Figure(figsize=(WIDTH, height), dpi=DPI, facecolor="white")
        self.canvas = FigureCanvasAgg(self.figure)
        self.renderer = self.canvas.get_renderer()

    def axes(self, left: float, bottom: float, width: float, height: float):
        return self.figure.add_axes((left / WIDTH, bottom / self.height, width / WIDTH,
                                     height / self.height))

    def title(self, text: str, subtitle: str = "") -> None:
        self.figure.text(0.25 / WIDTH, 1 - 0.3 / self.height, text, fontsize=14,
                         fontweight="bold", color=COLOURS["ink"], va="center")
        if subtitle:
            self.figure.text(0.25 / WIDTH, 1 - 0.58 / self.height, subtitle, fontsize=10,
                             color="#444444", va="center")

    def legend(self, handles: list, top: float, columns: int) -> None:
        self.figure.legend(handles=handles, loc="upper left", frameon=False,
                           bbox_to_anchor=(0.2 / WIDTH, 1 - top / self.height),
                           ncol=columns, fontsize=9, handlelength=1.8, columnspacing=1.6)

    def pixels(self) -> np.ndarray:
        self.canvas.draw()
        return np.asarray(self.canvas.buffer_rgba()).copy()

    def fits(self, text, room: float) -> bool:
        return text.get_window_extent(self.renderer).width <= room

    def widest(self, labels: list[str], fontsize: float) -> float:
        """The width, in inches, of the widest of `labels` (bold, to be safe)."""
        widest = 0.0
        for label in labels:
            drawn = self.figure.text(0, 0, label, fontsize=fontsize, fontweight="bold")
            widest = max(widest, drawn.get_window_extent(self.renderer).width / DPI)
            drawn.remove()
        return widest


def px(ax, x: float) -> float:
    """Where `x`, in the data of `ax`, lands on the canvas: pixels from its left."""
    return float(ax.transData.transform((x, 0))[0])


def png(pixels: np.ndarray) -> bytes:
    """RGBA pixels as PNG, with no text chunks (matplotlib's version would be one)."""
    out = io.BytesIO()
    imsave(out, pixels, format="png", dpi=DPI, metadata={"Software": None})
    return out.getvalue()


def stacked(parts: list[np.ndarray]) -> np.ndarray:
    """The pictures `parts`, one under the other, each widened with white to the
    widest."""
    width = max(p.shape[1] for p in parts)
    white = np.full((1, 1, 4), 255, dtype=np.uint8)
    return np.concatenate([np.concatenate(
        [p, np.broadcast_to(white, (p.shape[0], width - p.shape[1], 4))], axis=1)
        for p in parts], axis=0)
