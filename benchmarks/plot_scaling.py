#!/usr/bin/env python3
"""Plots the CSV of benchmarks/scaling as an SVG: ns per node against nodes, both axes logarithmic,
one line per phase. A flat line is a phase linear in graph size. Standard library only, so it runs
wherever the benchmark does.

  plot_scaling.py scaling.csv scaling.svg [--title TEXT]
"""
import argparse
import csv
import math
from collections import defaultdict

PHASES = [  # name in the CSV, legend, colour
    ("trace", "trace (ops to nodes)", "#1f77b4"),
    ("hash", "hash (post-order + graph key)", "#ff7f0e"),
    ("sync", "cache-hit sync", "#2ca02c"),
    ("lower", "lower", "#9467bd"),
    ("compile", "compile", "#d62728"),
    ("load", "load (serialize + LoadSerializedExecutable)", "#8c564b"),
]
WIDTH, HEIGHT = 820, 520
LEFT, RIGHT, TOP, BOTTOM = 80, 290, 50, 60


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("svg")
    parser.add_argument("--title", default="lazyrt: cost per node vs graph size (y = y * c + x chains)")
    args = parser.parse_args()

    series = defaultdict(list)
    with open(args.csv) as f:
        for row in csv.DictReader(f):
            series[row["phase"]].append((int(row["nodes"]), float(row["ns_per_node"])))
    points = [p for s in series.values() for p in s]
    if not points:
        raise SystemExit(f"plot_scaling: no rows in {args.csv}")
    x_lo = 10 ** math.floor(math.log10(min(n for n, _ in points)))
    x_hi = 10 ** math.ceil(math.log10(max(n for n, _ in points)))
    y_lo = 10 ** math.floor(math.log10(min(v for _, v in points)))
    y_hi = 10 ** math.ceil(math.log10(max(v for _, v in points)))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(n):
        return LEFT + plot_w * (math.log10(n) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo))

    def py(v):
        return TOP + plot_h * (1 - (math.log10(v) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT}" y="28" font-size="15">{args.title}</text>']
    decade = x_lo
    while decade <= x_hi:
        x = px(decade)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + plot_h}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{decade:,}</text>')
        decade *= 10
    decade = y_lo
    while decade <= y_hi:
        y = py(decade)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        label = f"{decade:g}" if decade < 1e5 else f"{decade:.0e}"
        out.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
        decade *= 10
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 18}" text-anchor="middle">nodes in the graph (log)</text>')
    out.append(f'<text transform="translate(22,{TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">'
               f'ns per node, median (log)</text>')

    legend_y = TOP + 10
    for name, label, colour in PHASES:
        if name not in series:
            continue
        pts = sorted(series[name])
        path = " ".join(f"{px(n):.1f},{py(v):.1f}" for n, v in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for n, v in pts:
            out.append(f'<circle cx="{px(n):.1f}" cy="{py(v):.1f}" r="3.5" fill="{colour}">'
                       f'<title>{label}: {n:,} nodes, {v:.1f} ns/node</title></circle>')
        lx = LEFT + plot_w + 16
        out.append(f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 22}" y2="{legend_y}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{lx + 28}" y="{legend_y + 4}">{label}</text>')
        legend_y += 22
    out.append("</svg>")
    with open(args.svg, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
