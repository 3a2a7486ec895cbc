"""Static PNG figures of a report (matplotlib, Agg backend: no display, no network).

Every figure is built from the exported tables only, so what is drawn is what the CSVs hold.
Missing data gives a labelled "no data" panel, never an error or an empty axis.
"""

from __future__ import annotations

import io
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from functools import lru_cache, wraps
from typing import Any, ParamSpec

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from PIL import Image

from draligned.analysis.table import Table

ORDER = ["OWN", "OTHER", "BOTH", "NONE", "UNKNOWN", "MISSING", "NO_DOCUMENT", "NOT_READ", "NO_RUN",
         "NO_REQUEST", "UNDEFINED"]
COLORS = {"OWN": "#2a9d8f", "OTHER": "#e76f51", "BOTH": "#8e6bbf", "NONE": "#8d99ae", "UNKNOWN": "#e9c46a",
          "MISSING": "#b5838d", "NO_DOCUMENT": "#cfd6df", "NOT_READ": "#e3e7ec", "NO_RUN": "#f1f3f5",
          "NO_REQUEST": "#a8dadc", "UNDEFINED": "#f4e3b1"}
# Each figure is laid out once with tight_layout and drawn once: ``bbox_inches="tight"`` (or a layout
# engine) would draw it twice, once to measure and once to save.
STYLE: dict[Any, Any] = {"font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.titleweight": "bold", "figure.dpi": 110}
"""The figures' look, applied while each is built and drawn (the process's own rcParams stay as they are)."""
PNG_COMPRESSION = 3
"""zlib level of the PNGs: about twice as fast as Pillow's default (6) and, as RGB, smaller than its RGBA."""

P = ParamSpec("P")


def _styled(draw: Callable[P, bytes]) -> Callable[P, bytes]:
    """``draw`` under the figures' STYLE."""
    @wraps(draw)
    def styled(*args: P.args, **kwargs: P.kwargs) -> bytes:
        with matplotlib.rc_context(STYLE):
            return draw(*args, **kwargs)
    return styled


def _figure(width: float, height: float, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    """A figure of ``ncols`` axes in a row (no pyplot: no global figure registry to add it to and close)."""
    fig = Figure(figsize=(width, height))
    return fig, list(fig.subplots(1, ncols, squeeze=False)[0])


def _ordered(states: set[str]) -> list[str]:
    return [s for s in ORDER if s in states] + sorted(states - set(ORDER))


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes: laid out, drawn once, and saved as RGB (the figure is opaque)."""
    canvas = FigureCanvasAgg(fig)  # before the layout, which measures the text with its renderer
    fig.tight_layout()  # fits labels, legends and the suptitle inside the figure, measured once
    canvas.draw()
    rgba = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buf = io.BytesIO()
    rgba.convert("RGB").save(buf, format="png", compress_level=PNG_COMPRESSION, dpi=(fig.dpi, fig.dpi))
    return buf.getvalue()


@lru_cache(maxsize=64)
@_styled
def no_data(title: str, reason: str) -> bytes:
    """A small labelled panel saying why there is nothing to draw (drawn once per title and reason: the
    same bytes every time, and reports without evaluator states or CESS rows show the same few)."""
    fig, (ax,) = _figure(6, 1.6)
    ax.axis("off")
    ax.text(0.5, 0.62, title, ha="center", va="center", weight="bold")
    ax.text(0.5, 0.3, f"no data: {reason}", ha="center", va="center", color="#6c757d")
    return png(fig)


def _hbars(ax: Axes, ys: Sequence[float], widths: Sequence[float], lefts: Sequence[float], height: float,
           color: str, label: str, edgecolor: str = "none") -> None:
    """Horizontal bars centred on ``ys`` as one collection: drawn in one call, where ``barh`` makes and draws
    a patch per bar. Like ``barh``, the bars' base stays on the axis edge (a sticky edge at 0)."""
    verts = [[(x, y - height / 2), (x + w, y - height / 2), (x + w, y + height / 2), (x, y + height / 2)]
             for y, w, x in zip(ys, widths, lefts, strict=True)]
    bars = PolyCollection(verts, facecolors=color, edgecolors=edgecolor, label=label)
    bars.sticky_edges.x.append(0)
    ax.add_collection(bars)


def _heat(ax: Axes, counts: Counter, rows: list[str], cols: list[str], xlabel: str, ylabel: str) -> None:
    grid = [[counts.get((r, c), 0) for c in cols] for r in rows]
    top = max((v for row in grid for v in row), default=0) or 1
    ax.imshow(grid, cmap="Blues", vmin=0, vmax=top, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=40, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v:
                ax.text(j, i, str(v), ha="center", va="center", color="white" if v > top / 2 else "#1d3557")


@_styled
def pair_heatmaps(matrix: Table | None, evaluator: str, comparisons: Sequence[str]) -> bytes:
    """One heatmap per phase: arm a state x arm b state over the primary comparisons."""
    recs = [r for r in (matrix.records() if matrix else []) if r["evaluator"] == evaluator
            and r["group_by"] == "all" and r["comparison"] in comparisons]
    if not recs:
        return no_data("Pair matrices", "no evaluator states for the primary comparisons")
    phases = list(dict.fromkeys(r["phase"] for r in recs))
    # One state list for every panel, so a cell sits at the same place in each (absent states stay empty).
    cats = [s for s in ORDER if s not in ("NO_REQUEST", "UNDEFINED")]
    if "requests" in phases:
        cats += ["NO_REQUEST", "UNDEFINED"]
    cats += sorted(({r["state_a"] for r in recs} | {r["state_b"] for r in recs}) - set(cats))
    fig, axes = _figure(3.9 * len(phases), 4.4, len(phases))
    for ax, phase in zip(axes, phases, strict=True):
        c: Counter = Counter()
        for r in recs:
            if r["phase"] == phase:
                c[(r["state_a"], r["state_b"])] += r["pairs"]
        _heat(ax, c, cats, cats, "arm b state", "arm a state" if ax is axes[0] else "")
        if ax is not axes[0]:
            ax.set_yticklabels([])
        ax.set_title(f"{phase}  (n={sum(c.values())} pairs)")
    fig.suptitle(f"Pair matrices, {' + '.join(comparisons)} pooled (the headline's comparisons; evaluator "
                 f"{evaluator})", x=0.01, ha="left")
    return png(fig)


@_styled
def state_distribution(dist: Table | None) -> bytes:
    """Stacked shares of states per model x harness (one bar per arm)."""
    recs = dist.records() if dist else []
    if not recs:
        return no_data("States by model and harness", "no evaluator states")
    bars: dict[str, Counter] = defaultdict(Counter)
    for r in recs:
        bars[f"{r['model']} · {r['harness']} · {r['arm']}"][r["state"]] += r["runs"]
    states = _ordered({r["state"] for r in recs})
    labels = sorted(bars)
    fig, (ax,) = _figure(8, 0.45 * len(labels) + 1.2)
    left = [0.0] * len(labels)
    for s in states:
        vals = [bars[b][s] / sum(bars[b].values()) for b in labels]
        _hbars(ax, range(len(labels)), vals, left, 0.8, COLORS.get(s, "#adb5bd"), s, edgecolor="white")
        left = [a + v for a, v in zip(left, vals, strict=True)]
    ax.autoscale_view()
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of runs")
    ax.legend(ncol=min(len(states), 6), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    return png(fig)


@_styled
def retention_flows(flows: Table | None) -> bytes:
    """Draft state -> final state counts over all comparisons."""
    recs = flows.records() if flows else []
    if not recs:
        return no_data("Draft to final", "no evaluator states")
    c: Counter = Counter()
    for r in recs:
        c[(r["draft_state"], r["final_state"])] += r["runs"]
    fig, (ax,) = _figure(4.8, 3.8)
    _heat(ax, c, _ordered({a for a, _ in c}), _ordered({b for _, b in c}), "final state", "draft state")
    ax.set_title("Draft to final: state flows")
    return png(fig)


@_styled
def text_change(tc: Table | None) -> bytes:
    """Draft-to-final text change per run, by harness (identical texts marked)."""
    recs = tc.records() if tc else []
    if not recs:
        return no_data("Draft-to-final text change", tc.empty_reason if tc and tc.empty_reason else "no runs")
    harnesses = sorted({r["harness"] for r in recs})
    fig, (ax,) = _figure(6.5, 0.7 * len(harnesses) + 1.4)
    for i, h in enumerate(harnesses):
        xs = [r["text_change"] for r in recs if r["harness"] == h]
        ys = [i + ((k % 7) - 3) * 0.05 for k in range(len(xs))]
        ax.scatter(xs, ys, s=22, alpha=0.75, color="#457b9d")
    ax.set_yticks(range(len(harnesses)), harnesses)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel(f"text change = 1 - Jaccard(word shingles), draft vs final   (n={len(recs)} runs)")
    ax.set_title("How much the text changed from draft to final")
    return png(fig)


@_styled
def process_counts(per_arm: Table | None) -> bytes:
    """Mean requests, drafts and tool calls per card x arm x harness (x model when there are several)."""
    recs = per_arm.records() if per_arm else []
    if not recs:
        return no_data("Process by arm", "no completed runs")
    labels = [f"{r['card_id']} · {r['arm']} · {r['harness']}"
              + (f" · {r['model']}" if len({x['model'] for x in recs}) > 1 else "") for r in recs]
    fig, (ax,) = _figure(8, 0.32 * len(recs) + 1.2)
    h = 0.27
    for k, (col, color) in enumerate((("requests_mean", "#457b9d"), ("tool_calls_mean", "#a8dadc"),
                                      ("drafts_mean", "#e76f51"))):
        _hbars(ax, [i + (k - 1) * h for i in range(len(recs))], [r[col] for r in recs], [0.0] * len(recs), h,
               color, col.replace("_mean", ""))
    ax.autoscale_view()
    ax.set_yticks(range(len(recs)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("mean per completed run")
    ax.legend(frameon=False, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return png(fig)


@_styled
def cess_vs_opened(by_arm: Table | None) -> bytes:
    """CESS estimate against the Opened Mean per arm (the diagonal marks equal values)."""
    recs = [r for r in (by_arm.records() if by_arm else []) if r["opened_mean"] is not None]
    if not recs:
        return no_data("CESS vs Opened Mean per arm", by_arm.empty_reason if by_arm and by_arm.empty_reason
                       else "no CESS estimates")
    fig, (ax,) = _figure(5.2, 4.4)
    for r in recs:
        color = "#2a9d8f" if r["arm"].startswith("P") else "#e76f51"
        if r["interval_low_mean"] is not None:
            ax.vlines(r["opened_mean"], r["interval_low_mean"], r["interval_high_mean"], color=color, lw=4, alpha=0.3)
        if r["cess_mean"] is not None:
            ax.scatter(r["opened_mean"], r["cess_mean"], color=color, s=34, edgecolor="white", zorder=3)
            if len(recs) <= 8:
                ax.annotate(f"{r['card_id']}·{r['arm']}", (r["opened_mean"], r["cess_mean"]), fontsize=7,
                            xytext=(4, 3), textcoords="offset points")
    for arm, color in (("first factor at P", "#2a9d8f"), ("first factor at Q", "#e76f51")):
        ax.scatter([], [], color=color, label=arm)
    ax.legend(frameon=False, fontsize=8, loc="upper left")
    lo = min(ax.get_xlim()[0], ax.get_ylim()[0])
    hi = max(ax.get_xlim()[1], ax.get_ylim()[1])
    ax.plot([lo, hi], [lo, hi], ls="--", color="#adb5bd", lw=1)
    ax.set_xlabel("Opened Mean (what was opened)")
    ax.set_ylabel("CESS (searchable pool); shaded bar = support interval")
    ax.set_title("CESS vs Opened Mean per arm")
    return png(fig)
