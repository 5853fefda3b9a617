#!/usr/bin/python3
"""Renders docs/monitoring.md's pictures from a real run: a zerorun timeline (Chrome trace-event JSON,
one file per rank) as a PNG, and the scalars of a TensorBoard event file as a grid of plots.

Usage: scripts/render-monitoring.py --trace trace.json [trace.rank1.json ...] --trace-out timeline.png
                                    [--step N] [--events DIR_OR_FILE --scalars-out scalars.png]
Needs python3-matplotlib (Debian) and, for --events, python3-protobuf and protoc (the event file is
decoded with the schema runtime/observe/tensorboard_event.proto). Not part of the build or the tests.
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLORS = {"step": "#dddddd", "phase": "#9ecae1", "forward": "#3182bd", "backward": "#e6550d",
          "recompute": "#fdae6b", "optimizer": "#31a354", "comm": "#756bb1"}


def load_trace(paths):
    spans, threads, procs = [], {}, {}
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        for e in doc["traceEvents"]:
            if e["ph"] == "M":
                if e["name"] == "thread_name":
                    threads[(e["pid"], e["tid"])] = e["args"]["name"]
                elif e["name"] == "process_name":
                    procs[e["pid"]] = e["args"]["name"]
            elif e["ph"] == "X":
                spans.append(e)
    return spans, threads, procs


def render_trace(paths, out, step):
    spans, threads, procs = load_trace(paths)
    steps = sorted((s for s in spans if s["cat"] == "step" and s["pid"] == 0), key=lambda s: s["ts"])
    if not steps:
        sys.exit("no step spans in the trace")
    w = steps[min(step, len(steps)) - 1]
    t0, t1 = w["ts"], w["ts"] + w["dur"]
    tracks = sorted(threads, reverse=True)  # drawn bottom-up: rank 0 main on top
    # Rows: per (pid, tid); on the main track, module spans are drawn by nesting depth.
    fig, ax = plt.subplots(figsize=(14, 1.0 + 0.9 * len(tracks) + 1.2))
    yticks, ylabels = [], []
    y = 0
    for key in tracks:
        pid, tid = key
        mine = [s for s in spans if (s["pid"], s["tid"]) == key and s["ts"] < t1 and s["ts"] + s["dur"] > t0]
        mine.sort(key=lambda s: (s["ts"], -s["dur"]))
        # Nesting depth by containment.
        stack, rows = [], []
        for s in mine:
            while stack and stack[-1] <= s["ts"]:
                stack.pop()
            rows.append(len(stack))
            stack.append(s["ts"] + s["dur"])
        depth = max(rows, default=0) + 1
        h = 0.9 / depth
        for s, r in zip(mine, rows):
            ax.broken_barh([((s["ts"] - t0) / 1e3, s["dur"] / 1e3)], (y + (depth - 1 - r) * h, h * 0.95),
                           facecolors=COLORS.get(s["cat"], "#999999"), edgecolor="none")
        yticks.append(y + 0.45)
        ylabels.append(f"{procs.get(pid, pid)}: {threads[key]}")
        y += 1
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels)
    ax.set_xlabel(f"ms since the start of {w['name']}")
    ax.set_xlim(0, (t1 - t0) / 1e3)
    ax.set_title(f"zerorun timeline: {w['name']} ({w['dur'] / 1e3:.1f} ms)")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLORS.items()], loc="upper center",
              bbox_to_anchor=(0.5, -0.25 if len(tracks) < 3 else -0.15), ncol=len(COLORS), fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def read_events(path, proto_dir):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--python_out={tmp}", "tensorboard_event.proto"],
                       check=True)
        sys.path.insert(0, tmp)
        import tensorboard_event_pb2 as pb  # noqa: E402
        data = open(path, "rb").read()
        pos, series = 0, {}
        while pos < len(data):
            (n,) = struct.unpack_from("<Q", data, pos)
            payload = data[pos + 12:pos + 12 + n]
            pos += 12 + n + 4
            ev = pb.Event()
            ev.ParseFromString(payload)
            if ev.WhichOneof("what") == "summary":
                for v in ev.summary.value:
                    series.setdefault(v.tag, []).append((ev.step, v.simple_value))
        return series


def render_scalars(path, out, proto_dir):
    if os.path.isdir(path):
        path = sorted(glob.glob(os.path.join(path, "**", "events.out.tfevents.*"), recursive=True))[-1]
    series = read_events(path, proto_dir)
    tags = [t for t in series if not t.startswith("Train/Samples/memory_MiB/")]
    mem = {t.rsplit("/", 1)[1]: v for t, v in series.items() if t.startswith("Train/Samples/memory_MiB/")}
    n = len(tags) + (1 if mem else 0)
    cols = 4
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(16, 2.6 * rows), squeeze=False)
    for ax, tag in zip(axes.flat, tags):
        xs, ys = zip(*series[tag])
        ax.plot(xs, ys, color="#e6550d", linewidth=1.2)
        ax.set_title(tag, fontsize=9)
        ax.tick_params(labelsize=7)
    if mem:
        ax = axes.flat[len(tags)]
        for k, v in mem.items():
            xs, ys = zip(*v)
            ax.plot(xs, ys, label=k, linewidth=1.2)
        ax.set_title("Train/Samples/memory_MiB/*", fontsize=9)
        ax.legend(fontsize=6)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(f"TensorBoard scalars of {os.path.basename(path)} (x: global samples)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", nargs="*", default=[])
    ap.add_argument("--trace-out", default="timeline.png")
    ap.add_argument("--step", type=int, default=2)
    ap.add_argument("--events")
    ap.add_argument("--scalars-out", default="scalars.png")
    ap.add_argument("--proto-dir", default=os.path.join(os.path.dirname(__file__), "..", "runtime", "observe"))
    a = ap.parse_args()
    if a.trace:
        render_trace(a.trace, a.trace_out, a.step)
    if a.events:
        render_scalars(a.events, a.scalars_out, a.proto_dir)


if __name__ == "__main__":
    main()
