"""The privacy-barrier diagram: who sent which arrays to whom, and how many bytes.

Drawn from a message-log summary (:meth:`fedviews.federation.MessageLog.summary`):
one box per party and one arrow per (sender, receiver) pair that exchanged
messages, labelled with the array names and the bytes that crossed; with more pairs
than :data:`MAX_ARROWS`, a sender x receiver table with those labels in its cells. A
pair a privacy policy forbids never appears, because the runtime never let such a
message leave its sender.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fedviews.report._figures import pyplot, svg_of

_BOX_W, _BOX_H = 1.05, 0.34
_FONT = 8.5  # points, of the arrow labels
_COORD_COLOUR, _PARTY_COLOUR, _OWNER_COLOUR = "#fde3c8", "#dceaf7", "#dff2dc"
#: the styles of a party's box, of an arrow (an arc of curvature _RAD), of an arrow's label
#: and of the label's box (edged in the arrow's colour)
_RAD = 0.14
_PARTY: dict[str, Any] = dict(boxstyle="round,pad=0.02", edgecolor="#444", linewidth=1.0, zorder=3)
_ARROW: dict[str, Any] = dict(
    connectionstyle=f"arc3,rad={_RAD}", arrowstyle="-|>", mutation_scale=11, linewidth=1.1, zorder=2
)
_LABEL: dict[str, Any] = dict(ha="center", va="center", fontsize=_FONT, color="#222", zorder=5)
_LABEL_BOX: dict[str, Any] = dict(boxstyle="round,pad=0.2", facecolor="white", alpha=0.92)
#: more (sender, receiver) pairs than this: a sender x receiver table instead of arrows
MAX_ARROWS = 12
#: the table's padding around a text (points) and the faces of a party's own cell and of
#: a pair that exchanged nothing
_PAD_PT = 5.0
_SELF, _NOTHING = "#d9d9d9", "#f3f3f3"


@dataclass(frozen=True)
class Crossing:
    """What went from one party to another over a run."""

    sender: str
    receiver: str
    arrays: tuple[str, ...]
    nbytes: int | None  # None: the log predates per-pair byte counts


def format_bytes(n: float | None) -> str:
    """``1234567`` -> ``"1.2 MB"`` (decimal units, as network traffic is counted)."""
    if n is None:
        return "n/a"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def crossings_of(summary: Mapping[str, Any]) -> list[Crossing]:
    """Every (sender, receiver) pair of a message-log summary, sorted."""
    names: Mapping[str, Sequence[str]] = summary.get("crossings") or {}
    nbytes: Mapping[str, int] = summary.get("crossing_bytes") or {}
    out = []
    for pair in sorted(set(names) | set(nbytes)):
        sender, _, receiver = pair.partition(" -> ")
        n = nbytes.get(pair)
        out.append(
            Crossing(sender, receiver, tuple(names.get(pair, ())), None if n is None else int(n))
        )
    return out


def _short_names(names: Sequence[str], width: int = 30) -> list[str]:
    """The array names of an arrow label: ``update/0.bias, update/4.weight, ...`` become
    ``update/* (6)``, the session's ``psi_*`` arrays ``PSI``; wrapped to lines of at most ``width`` characters."""
    groups: dict[str, list[str]] = {}
    for n in names:
        head, sep, _ = n.partition("/")
        key = "PSI" if n.startswith("psi_") else head + "/*" if sep else n
        groups.setdefault(key, []).append(n)
    items = [k if "/" not in k else f"{k} ({len(v)})" for k, v in groups.items()]
    if len(items) > 4:
        items = [*items[:3], f"+{len(items) - 3} more"]
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + len(item) + 2 <= width:
            lines[-1] += ", " + item
        else:
            lines.append(item)
    return lines or ["(metadata only)"]


def _layout(
    nodes: list[str], pairs: list[tuple[str, str]], coordinator: str | None
) -> tuple[dict[str, tuple[float, float]], set[str]]:
    """Positions of the boxes: the coordinator on top, parties that talk to other parties
    (the smaller side of that bipartite graph, e.g. label owners) in a middle row at the
    sides, the other parties in the bottom row. Returns positions and the middle row."""
    parties = [n for n in nodes if n != coordinator]
    adj: dict[str, set[str]] = {p: set() for p in parties}
    for s, r in pairs:
        if s in adj and r in adj and s != r:
            adj[s].add(r)
            adj[r].add(s)
    colour: dict[str, int] = {}
    bipartite = True
    for start in parties:
        if start in colour or not adj[start]:
            continue
        colour[start] = 0
        stack = [start]
        while stack:
            u = stack.pop()
            for v in adj[u]:
                if v not in colour:
                    colour[v] = 1 - colour[u]
                    stack.append(v)
                elif colour[v] == colour[u]:
                    bipartite = False
    middle: set[str] = set()
    if colour and bipartite:
        sides = [sorted(p for p, c in colour.items() if c == k) for k in (0, 1)]
        middle = set(sides[0] if len(sides[0]) <= len(sides[1]) else sides[1])
    bottom = [p for p in parties if p not in middle]
    step = 2.8 if middle else 2.2  # parties that talk to parties: more arrows between rows
    pos: dict[str, tuple[float, float]] = {p: (i * step, 0.0) for i, p in enumerate(bottom)}
    right = max(len(bottom) - 1, 0) * step
    top = 0.0
    if middle:
        top = 2.6
        mids = sorted(middle)
        lo, hi = (right * 0.15, right * 0.85) if right > 0 else (-1.5, 1.5)
        for k, p in enumerate(mids):
            pos[p] = (lo + (hi - lo) * k / (len(mids) - 1) if len(mids) > 1 else lo, top)
    if coordinator is not None and coordinator in nodes:
        pos[coordinator] = (right / 2, top + (2.8 if middle else 2.4))
    return pos, middle


def _bezier(
    p0: tuple[float, float], p2: tuple[float, float], rad: float, t: float
) -> tuple[float, float]:
    """A point of matplotlib's ``arc3`` connection (a quadratic Bézier) at ``t``."""
    (x1, y1), (x2, y2) = p0, p2
    cx, cy = (x1 + x2) / 2 + rad * (y2 - y1), (y1 + y2) / 2 - rad * (x2 - x1)
    u = 1 - t
    return (u * u * x1 + 2 * u * t * cx + t * t * x2, u * u * y1 + 2 * u * t * cy + t * t * y2)


def _box(x: float, y: float, w: float, h: float) -> tuple[float, float, float, float]:
    """The box ``(x0, y0, x1, y1)`` of width ``w`` and height ``h`` centred on ``(x, y)``."""
    return (x - w / 2, y - h / 2, x + w / 2, y + h / 2)


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """Area shared by two boxes ``(x0, y0, x1, y1)``."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return max(w, 0.0) * max(h, 0.0)


def barrier_diagram(summary: Mapping[str, Any], *, coordinator: str | None = "coordinator") -> str:
    """The privacy-barrier diagram of one run as inline SVG (see :func:`barrier_figure`).

    Returns
    -------
    str
        An ``<svg>`` element whose text (party and array names, byte counts) is text.
    """
    return svg_of(barrier_figure(summary, coordinator=coordinator), pyplot())


def barrier_figure(summary: Mapping[str, Any], *, coordinator: str | None = "coordinator") -> Any:
    """The privacy-barrier diagram of one run as a matplotlib figure.

    Up to :data:`MAX_ARROWS` pairs, a graph: a box per party, an arrow per pair. More
    pairs (Multi-VFL's data owners x label owners) would be a tangle of arrows: a
    sender x receiver table instead, its cells sized to their labels so that none overlap.

    Parameters
    ----------
    summary : Mapping
        A message-log summary (``message_log.json``): ``crossings`` (array names per
        ``"sender -> receiver"``), ``crossing_bytes`` (bytes per pair) and ``per_party``.
    coordinator : str or None
        The coordinator's name, drawn on top (first in the table); ``None``: no coordinator.

    Returns
    -------
    matplotlib.figure.Figure
    """
    crossings = crossings_of(summary)
    pairs = [(c.sender, c.receiver) for c in crossings]
    nodes = sorted({n for p in pairs for n in p} | set(summary.get("per_party") or {}))
    pos, middle = _layout(nodes, pairs, coordinator)
    faces = {n: _OWNER_COLOUR if n in middle else _PARTY_COLOUR for n in nodes}
    if coordinator in faces:
        faces[coordinator] = _COORD_COLOUR
    if len(crossings) > MAX_ARROWS:
        order = sorted(nodes, key=lambda n: (n != coordinator, n not in middle, n))
        return _matrix(crossings, order, faces)
    return _graph(crossings, pos, faces)


def _label(c: Crossing) -> str:
    """What crossed from one party to another: the arrays' short names and the bytes."""
    return "\n".join(
        _short_names(c.arrays) + ([format_bytes(c.nbytes)] if c.nbytes is not None else [])
    )


def _graph(
    crossings: list[Crossing], pos: dict[str, tuple[float, float]], faces: dict[str, str]
) -> Any:
    """A box per party at ``pos``, an arrow per crossing labelled with :func:`_label`."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    xs = [x for x, _ in pos.values()] or [0.0]
    ys = [y for _, y in pos.values()] or [0.0]
    x0, x1 = min(xs) - 1.6, max(xs) + 1.6
    y0, y1 = min(ys) - 0.6, max(ys) + 0.6
    plt = pyplot()
    # one inch per data unit and an equal aspect: arcs and label sizes in one unit; the axes
    # fill the figure (its size is the drawing's), so there is nothing to lay out
    fig = plt.figure(figsize=(x1 - x0, y1 - y0))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set(xlim=(x0, x1), ylim=(y0, y1), aspect="equal")
    ax.axis("off")
    boxes: dict[str, Any] = {}
    taken: list[tuple[float, float, float, float]] = []
    for name, (x, y) in pos.items():
        corner = _box(x, y, _BOX_W, _BOX_H)[:2]
        box = FancyBboxPatch(corner, _BOX_W, _BOX_H, facecolor=faces[name], **_PARTY)
        ax.add_patch(box)
        boxes[name] = box
        ax.text(x, y, name, ha="center", va="center", fontsize=9, weight="bold", zorder=4)
        taken.append(_box(x, y, _BOX_W, _BOX_H))
    colours = plt.get_cmap("tab10")
    senders = sorted({c.sender for c in crossings})
    char_w = _FONT * 0.56 / 72  # data units (inches) per character and per line
    line_h = _FONT * 1.25 / 72
    for c in crossings:
        if c.sender not in pos or c.receiver not in pos:
            continue
        colour = colours(senders.index(c.sender) % 10)
        p0, p2 = pos[c.sender], pos[c.receiver]
        arrow = FancyArrowPatch(
            p0, p2, patchA=boxes[c.sender], patchB=boxes[c.receiver], color=colour, **_ARROW
        )
        ax.add_patch(arrow)
        lines = _label(c).splitlines()
        w = max(len(ln) for ln in lines) * char_w + 0.06
        h = len(lines) * line_h + 0.05
        # the label goes where along the arc it covers the least of the boxes and labels so far
        spots = [
            _bezier(p0, p2, _RAD, t) for t in (0.5, 0.4, 0.6, 0.32, 0.68, 0.25, 0.75, 0.45, 0.55)
        ]
        lx, ly = min(
            spots, key=lambda xy: sum(_overlap(_box(xy[0], xy[1], w, h), o) for o in taken)
        )
        taken.append(_box(lx, ly, w, h))
        ax.text(lx, ly, "\n".join(lines), bbox={**_LABEL_BOX, "edgecolor": colour}, **_LABEL)
    if not crossings:
        middle_of = ((x0 + x1) / 2, (y0 + y1) / 2)
        ax.text(*middle_of, "no message crossed", ha="center", fontsize=10, color="#555")
    return fig


def _matrix(crossings: list[Crossing], order: list[str], faces: dict[str, str]) -> Any:
    """A sender (row) x receiver (column) table of the crossings, in ``order`` (the
    coordinator, the parties that talk to parties, the others). Every text is measured
    first, then each column is as wide and each row as tall as its widest and tallest text
    (plus padding): no two texts can overlap, however many pairs there are."""
    from matplotlib.patches import Rectangle

    plt = pyplot()
    fig = plt.figure()
    renderer = fig.canvas.get_renderer()
    corner = "from \u2193  to \u2192"
    cells = {(c.sender, c.receiver): _label(c) for c in crossings}

    def size(text: str, **style: Any) -> tuple[float, float]:
        t = fig.text(0, 0, text, **style)
        bb = t.get_window_extent(renderer)
        t.remove()
        return bb.width, bb.height

    head: dict[str, Any] = dict(fontsize=9, weight="bold")
    body: dict[str, Any] = dict(fontsize=_FONT)
    pad = _PAD_PT * fig.dpi / 72
    names = {n: size(n, **head) for n in order}
    texts = {k: size(v, **body) for k, v in cells.items()}
    corner_wh = size(corner, **body)
    widths = [max([corner_wh[0]] + [names[n][0] for n in order]) + 2 * pad] + [
        max([names[r][0]] + [texts[s, r][0] for s in order if (s, r) in texts]) + 2 * pad
        for r in order
    ]
    heights = [max([corner_wh[1]] + [names[n][1] for n in order]) + 2 * pad] + [
        max([names[s][1]] + [texts[s, r][1] for r in order if (s, r) in texts]) + 2 * pad
        for s in order
    ]
    lefts = [pad + sum(widths[:i]) for i in range(len(widths) + 1)]
    tops = [pad + sum(heights[:i]) for i in range(len(heights) + 1)]
    fig.set_size_inches((lefts[-1] + pad) / fig.dpi, (tops[-1] + pad) / fig.dpi)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set(xlim=(0, lefts[-1] + pad), ylim=(tops[-1] + pad, 0))  # pixels from the top left
    ax.axis("off")

    def cell(i: int, j: int, text: str, face: str, **style: Any) -> None:
        ax.add_patch(
            Rectangle(
                (lefts[j], tops[i]),
                widths[j],
                heights[i],
                facecolor=face,
                edgecolor="#999",
                linewidth=0.8,
            )
        )
        if text:
            ax.text(
                (lefts[j] + lefts[j + 1]) / 2,
                (tops[i] + tops[i + 1]) / 2,
                text,
                ha="center",
                va="center",
                color="#222",
                **style,
            )

    cell(0, 0, corner, "white", **body)
    for k, n in enumerate(order, 1):
        cell(0, k, n, faces[n], **head)  # receivers along the top
        cell(k, 0, n, faces[n], **head)  # senders down the side
    for i, s in enumerate(order, 1):
        for j, r in enumerate(order, 1):
            face = _SELF if s == r else "white" if (s, r) in cells else _NOTHING
            cell(i, j, cells.get((s, r), ""), face, **body)
    return fig
