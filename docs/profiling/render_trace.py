#!/usr/bin/env python3
"""Draws a window of a loom timeline (cpu_timeline_display_{r}.json) as a standalone HTML page,
and with --png takes a screenshot of it with headless Chromium, for docs/profiling.md.

    python3 render_trace.py prof/cpu_timeline_display_0.json --html out.html --png out.png
    python3 render_trace.py TRACE --from-us 252000 --to-us 272500 --png step2.png

The page draws one band per thread (pid, tid) in the window, its X events stacked by nesting
depth (step slice, Cell scopes, kernels), colored by role or category, named where the slice is
wide enough; a time axis in ms; each counter ("memory": plan, rss) as a line. The default window
is the second step slice (the first steady step: the first one compiles), else the whole trace.
Needs only Python 3; --png needs Debian's `chromium` (apt-get install chromium), a docs tool,
not a test dependency.
"""
import argparse
import html
import json
import os
import re
import subprocess
import sys

STEP_NAME = re.compile(r"^step\b", re.IGNORECASE)


def load_events(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:  # a streamed array with no closing bracket
        data = json.loads(text.rstrip().rstrip(",") + "]")
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict)]


def default_window(events):
    """The second step slice on the main thread, else the first, else the whole trace."""
    steps = sorted((e for e in events
                    if e.get("ph") == "X" and STEP_NAME.match(str(e.get("name", "")))),
                   key=lambda e: e["ts"])
    if steps:
        s = steps[1] if len(steps) > 1 else steps[0]
        return s["ts"], s["ts"] + s["dur"], s["name"]
    timed = [e for e in events if e.get("ph") in ("X", "C")]
    if not timed:
        sys.exit("render_trace: no X or C events in the trace")
    return (min(e["ts"] for e in timed), max(e["ts"] + e.get("dur", 0) for e in timed),
            "the whole trace")


def layout(events, t0, t1):
    """Bands of the window: one per (pid, tid) with its slices at their nesting depth, then the
    counter series. Returns plain data for the page's script."""
    names, sort_index = {}, {}
    for e in events:
        if e.get("ph") != "M":
            continue
        args = e.get("args", {})
        if e.get("name") == "process_name":
            names[(e["pid"], None)] = args.get("name")
        elif e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = args.get("name")
        elif e.get("name") == "thread_sort_index":
            sort_index[(e["pid"], e["tid"])] = args.get("sort_index", 0)

    tracks = {}
    for e in events:
        if e.get("ph") == "X" and e["ts"] < t1 and e["ts"] + e["dur"] > t0:
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    bands = []
    for key in sorted(tracks, key=lambda k: (str(k[0]), sort_index.get(k, 0), str(k[1]))):
        slices, stack = [], []
        for e in sorted(tracks[key], key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            args = e.get("args", {})
            slices.append({"ts": e["ts"], "dur": e["dur"], "depth": len(stack),
                           "name": e["name"],
                           "kind": str(args.get("role") or e.get("cat") or "").split(",")[0]})
            stack.append(e["ts"] + e["dur"])
        process = names.get((key[0], None)) or f"pid {key[0]}"
        thread = names.get(key) or f"tid {key[1]}"
        bands.append({"label": f"{process} / {thread}", "slices": slices,
                      "rows": 1 + max(s["depth"] for s in slices)})

    series = {}
    for e in sorted((e for e in events if e.get("ph") == "C"), key=lambda e: e["ts"]):
        for k, v in e.get("args", {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                series.setdefault((e["pid"], e["name"], k), []).append([e["ts"], v])
    counters = []
    for (pid, name, k), points in sorted(series.items(), key=lambda s: tuple(map(str, s[0]))):
        before = [p for p in points if p[0] < t0][-1:]  # the value in force at the window's start
        inside = [p for p in points if t0 <= p[0] <= t1]
        if before or inside:
            process = names.get((pid, None)) or f"pid {pid}"
            counters.append({"label": f"{process} / {name}.{k}", "points": before + inside})
    return bands, counters


PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
  body { margin: 0; background: #fff; font: 13px "DejaVu Sans", sans-serif; color: #222; }
  #head { padding: 8px 12px 4px; }
  #head b { font-size: 15px; }
  .key { display: inline-block; margin-right: 14px; }
  .key i { display: inline-block; width: 12px; height: 12px; margin-right: 4px;
           vertical-align: -2px; }
</style></head>
<body>
<div id="head"><b>__TITLE__</b><br><span id="legend"></span></div>
<canvas id="c"></canvas>
<script>
const data = __DATA__;
const colors = {forward: "#4e79a7", backward: "#f28e2b", optimizer: "#59a14f",
                communication: "#b07aa1", step: "#bab0ac", "data wait": "#e15759",
                compile: "#edc948", scope: "#d4e4f2", cell: "#d4e4f2", pool: "#76b7b2"};
function colorOf(s) {
  if (colors[s.kind]) return colors[s.kind];
  if (/^step\\b/i.test(s.name)) return colors.step;
  if (/data wait/i.test(s.name)) return colors["data wait"];
  if (/compile/i.test(s.name)) return colors.compile;
  let h = 0;  // any other category: a stable hue of its name
  for (const ch of s.kind || s.name) h = (h * 31 + ch.charCodeAt(0)) % 360;
  return `hsl(${h}, 45%, 65%)`;
}
const legend = document.getElementById("legend");
for (const k of ["forward", "backward", "optimizer", "communication", "step", "data wait",
                 "compile", "scope"]) {
  legend.insertAdjacentHTML("beforeend",
      `<span class="key"><i style="background:${colors[k]}"></i>${k}</span>`);
}
const W = window.innerWidth;
const H = window.innerHeight - document.getElementById("head").offsetHeight - 4;
const canvas = document.getElementById("c");
canvas.width = W; canvas.height = H;
const g = canvas.getContext("2d");
const left = 170, right = 16, axis = 28, gap = 6, counterH = 60;
const rows = data.bands.reduce((n, b) => n + b.rows, 0);
// Rows of at most 20 px, fewer when the bands would not fit the window.
const free = H - axis - data.bands.length * gap - data.counters.length * (counterH + gap);
const rowH = Math.max(6, Math.min(20, free / rows));
const x = t => left + (t - data.t0) / (data.t1 - data.t0) * (W - left - right);

let y = axis;
for (const b of data.bands) {
  g.fillStyle = "#f6f6f6"; g.fillRect(0, y, W, b.rows * rowH);
  g.fillStyle = "#222"; g.font = "12px DejaVu Sans, sans-serif";
  g.fillText(b.label, 6, y + Math.min(rowH, 16) - 3);
  for (const s of b.slices) {
    const x0 = Math.max(left, x(s.ts)), x1 = Math.min(W - right, x(s.ts + s.dur));
    const top = y + s.depth * rowH;
    g.fillStyle = colorOf(s);
    g.fillRect(x0, top + 1, Math.max(1, x1 - x0), rowH - 2);
    if (x1 - x0 > 30 && rowH >= 10) {
      g.save(); g.beginPath(); g.rect(x0, top, x1 - x0, rowH); g.clip();
      g.fillStyle = "#111"; g.font = `${Math.min(11, rowH - 4)}px DejaVu Sans, sans-serif`;
      g.fillText(s.name, x0 + 3, top + rowH - 5);
      g.restore();
    }
  }
  y += b.rows * rowH + gap;
}
for (const c of data.counters) {  // a step line scaled to its own maximum
  const max = Math.max(...c.points.map(p => p[1])) || 1;
  g.fillStyle = "#f6f6f6"; g.fillRect(0, y, W, counterH);
  g.fillStyle = "#222"; g.font = "12px DejaVu Sans, sans-serif";
  g.fillText(c.label, 6, y + 14);
  g.fillText(`max ${max >= 1048576 ? (max / 1048576).toFixed(1) + " MiB" : max}`, 6, y + 30);
  g.strokeStyle = "#e15759"; g.lineWidth = 1.5; g.beginPath();
  let last = null;  // a value holds until the next sample
  for (const [t, v] of c.points) {
    const px = Math.max(left, x(t)), py = y + counterH - 4 - v / max * (counterH - 8);
    if (last === null) g.moveTo(px, py); else { g.lineTo(px, last); g.lineTo(px, py); }
    last = py;
  }
  g.lineTo(W - right, last); g.stroke(); g.lineWidth = 1;
  y += counterH + gap;
}

// The axis: ms from the profiler's start, a round step between ticks, its lines over the bands.
g.font = "11px DejaVu Sans, sans-serif"; g.fillStyle = "#444"; g.strokeStyle = "rgba(0,0,0,0.12)";
const raw = (data.t1 - data.t0) / 1000 / 10, decade = Math.pow(10, Math.floor(Math.log10(raw)));
const tick = [1, 2, 5, 10].map(m => m * decade).find(t => t >= raw);
for (let ms = Math.ceil(data.t0 / 1000 / tick) * tick; ms <= data.t1 / 1000; ms += tick) {
  const px = x(ms * 1000);
  g.beginPath(); g.moveTo(px, axis - 6); g.lineTo(px, y - gap); g.stroke();
  if (px < W - 50) g.fillText(`${+ms.toFixed(3)} ms`, px + 2, axis - 10);
}
</script></body></html>
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="cpu_timeline_display_{r}.json")
    ap.add_argument("--from-us", type=float, help="window start, us (default: the second step)")
    ap.add_argument("--to-us", type=float, help="window end, us")
    ap.add_argument("--html", help="the page to write (default: TRACE with .html)")
    ap.add_argument("--png", help="also take a screenshot with headless Chromium")
    ap.add_argument("--height", type=int, default=900,
                    help="the screenshot's height in pixels (default 900; width 1600)")
    ap.add_argument("--chromium", default="chromium", help="the browser (default: chromium)")
    args = ap.parse_args()

    events = load_events(args.trace)
    t0, t1, what = default_window(events)
    if args.from_us is not None or args.to_us is not None:
        t0 = args.from_us if args.from_us is not None else t0
        t1 = args.to_us if args.to_us is not None else t1
        what = "the window given"
    if t1 <= t0:
        sys.exit(f"render_trace: expected --to-us after --from-us, got {t0} to {t1}")
    bands, counters = layout(events, t0, t1)
    if not bands and not counters:
        sys.exit(f"render_trace: no event between {t0} and {t1} us")

    title = (f"{os.path.basename(args.trace)}: {what}, {t0 / 1000:.3f} to {t1 / 1000:.3f} ms "
             f"({(t1 - t0) / 1000:.3f} ms)")
    data = json.dumps({"t0": t0, "t1": t1, "bands": bands, "counters": counters},
                      separators=(",", ":")).replace("</", "<\\/")
    out_html = os.path.abspath(args.html or os.path.splitext(args.trace)[0] + ".html")
    with open(out_html, "w", encoding="utf-8") as f:
        f.write(PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", data))
    print(f"render_trace: {out_html} ({sum(len(b['slices']) for b in bands)} slices in "
          f"{len(bands)} threads, {len(counters)} counters)")
    if args.png:
        png = os.path.abspath(args.png)
        cmd = [args.chromium, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
               f"--screenshot={png}", f"--window-size=1600,{args.height}", "file://" + out_html]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            sys.exit(f"render_trace: no '{args.chromium}' to take the screenshot "
                     "(apt-get install chromium)")
        if run.returncode != 0 or not os.path.exists(png):
            sys.exit(f"render_trace: {' '.join(cmd)} failed ({run.returncode}):\n{run.stderr}")
        print(f"render_trace: {png}")


if __name__ == "__main__":
    main()
