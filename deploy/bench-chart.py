#!/usr/bin/env python3
"""Draws the figures of `nh-bench --output FILE` as a PNG.

One small panel per figure that names a baseline: the reference's bar beside the figure's, each with
its value and unit written on it, and the ratio (the hub's figure over the reference's) in the
panel's title. Figures without a baseline that no panel shows, and figures whose reference is
missing or not measured, are listed in a last text panel.

Usage: deploy/bench-chart.py RESULTS.json CHART.png [--title TEXT]
Exit codes: 0 the chart was written, 1 matplotlib is missing, 2 bad arguments or a malformed
results file (the message names the file and what is wrong).
"""
import argparse
import json
import math
import os
import sys
import textwrap

# Units of figures where less is better: their ratio below 1 is the hub's advantage.
TIME_UNITS = {"s", "ms", "us", "µs", "ns"}


class Malformed(Exception):
    pass


def load(path):
    """The results document, checked: a JSON object whose "results" is a non-empty list of figures,
    each with a non-empty "name", a "unit" and a finite number "rate"; "baseline" and "note", when
    present, are strings (or null); "machine", when present, is an object."""
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except OSError as error:
        raise Malformed(f"cannot read it: {error.strerror or error}")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise Malformed(f"not JSON: {error}")
    if not isinstance(document, dict):
        raise Malformed("not a JSON object; nh-bench --output writes {\"machine\": …, \"results\": […]}")
    machine = document.get("machine", {})
    if not isinstance(machine, dict):
        raise Malformed("\"machine\" must be an object")
    results = document.get("results")
    if not isinstance(results, list):
        raise Malformed("no \"results\" list; nh-bench --output writes {\"machine\": …, \"results\": […]}")
    if not results:
        raise Malformed("\"results\" is empty: nothing to draw")
    for index, result in enumerate(results):
        where = f"results[{index}]"
        if not isinstance(result, dict):
            raise Malformed(f"{where} is not an object")
        if not isinstance(result.get("name"), str) or not result["name"]:
            raise Malformed(f"{where} has no \"name\"")
        where = f"{where} ({result['name']})"
        if not isinstance(result.get("unit"), str):
            raise Malformed(f"{where} has no \"unit\"")
        rate = result.get("rate")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate):
            raise Malformed(f"{where}: \"rate\" must be a number, not {json.dumps(rate)}")
        for key in ("baseline", "note"):
            if result.get(key) is not None and not isinstance(result[key], str):
                raise Malformed(f"{where}: \"{key}\" must be a string")
    return machine, results


def plan(results):
    """(pairs, listed): each figure with a measured baseline and its reference, and the lines of the
    figures shown only as text. The first figure of a name is the reference, as in nh-bench."""
    by_name = {}
    for result in results:
        by_name.setdefault(result["name"], result)
    pairs, listed = [], []
    for result in results:
        baseline = result.get("baseline")
        if not baseline:
            continue
        reference = by_name.get(baseline)
        if result["rate"] <= 0:
            listed.append(f"{result['name']}: not measured" + (f" ({result['note']})" if result.get("note") else ""))
        elif reference is None or reference["rate"] <= 0:
            listed.append(line(result, f"{baseline} not measured in this run"))
        else:
            pairs.append((result, reference))
    shown = {id(figure) for pair in pairs for figure in pair}
    listed += [line(result, result.get("note")) for result in results if not result.get("baseline") and id(result) not in shown]
    return pairs, listed


def line(result, why):
    return f"{result['name']}: {number(result['rate'])} {result['unit']}" + (f" ({why})" if why else "")


def wrap(text, width):
    return "\n".join(textwrap.wrap(text, width, break_long_words=False))


def number(value):
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def draw(machine, results, output, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs, listed = plan(results)
    panels = len(pairs) + (1 if listed else 0)
    columns = min(4, panels)
    rows = math.ceil(panels / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.4 * columns, 3.9 * rows), squeeze=False)
    cells = [axis for row in axes for axis in row]
    for axis, (hub, reference) in zip(cells, pairs):
        values = [reference["rate"], hub["rate"]]
        bars = axis.bar([0, 1], values, color=["#9e9e9e", "#1f77b4"], width=0.6)
        axis.set_xticks([0, 1], [wrap(reference["name"], 24), wrap(hub["name"], 24)], fontsize=7)
        for bar, value, unit in zip(bars, values, [reference["unit"], hub["unit"]]):
            axis.annotate(f"{number(value)} {unit}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                          xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=8)
        axis.set_ylim(0, max(values) * 1.22)
        axis.set_yticks([])
        for side in ("top", "right", "left"):
            axis.spines[side].set_visible(False)
        ratio = hub["rate"] / reference["rate"]
        better = ", lower is better" if hub["unit"] in TIME_UNITS else ""
        axis.set_title(wrap(hub["name"], 40) + f"\n{ratio:.2f}× the reference{better}", fontsize=9)
    if listed:
        axis = cells[len(pairs)]
        axis.axis("off")
        lines = ["Figures without a reference:"]
        for text in listed:
            lines += textwrap.wrap(text, 60, subsequent_indent="    ")
        axis.text(0, 1, "\n".join(lines), va="top", ha="left", fontsize=7, family="monospace", transform=axis.transAxes)
    for axis in cells[panels:]:
        axis.axis("off")
    if title is None:
        title = "nh-bench: each figure (blue) beside its reference (grey)"
        facts = [f"{machine['cores']} cores" if "cores" in machine else "", str(machine.get("date", "")), str(machine.get("host", ""))]
        if any(facts):
            title += " — " + ", ".join(fact for fact in facts if fact)
    figure.suptitle(title, fontsize=11)
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return len(pairs), len(listed)


def main(argv):
    parser = argparse.ArgumentParser(prog="bench-chart", description="Draws nh-bench --output's JSON as a PNG.")
    parser.add_argument("results", help="the JSON file nh-bench --output wrote")
    parser.add_argument("chart", help="the PNG file to write")
    parser.add_argument("--title", help="the chart's title (default: the machine and date of the run)")
    arguments = parser.parse_args(argv)
    try:
        machine, results = load(arguments.results)
    except Malformed as error:
        print(f"bench-chart: {arguments.results}: {error}", file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("bench-chart: matplotlib is missing; install it with python3 -m pip install matplotlib", file=sys.stderr)
        return 1
    pairs, listed = draw(machine, results, arguments.chart, arguments.title)
    print(f"bench-chart: {pairs} figures beside their reference, {listed} listed, in {os.path.abspath(arguments.chart)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
