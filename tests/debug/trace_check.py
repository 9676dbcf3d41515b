#!/usr/bin/env python3
"""Validates a Trace Event Format file (the Chrome/Perfetto timeline; formats.md section 7).

Usage: python3 trace_check.py FILE.json

Checks, in this order, stopping at the first problem:
  1. the container: a JSON object with a "traceEvents" array (displayTimeUnit, when given, "ms"
     or "ns"), or a JSON array of events (a missing closing "]" and a trailing comma are
     tolerated, as catapult's importer does);
  2. each event, in file order: an object with a string "ph"; "pid" (a number or a string) except
     for global instant events; "tid" for thread events (X, B, E, thread-scoped i/I, thread_*
     metadata); "name" except on E; a finite numeric "ts" except on M; for X a numeric
     "dur" >= 0; for M one of the known names (process_name, process_labels, process_sort_index,
     thread_name, thread_sort_index, num_cpus) with its argument; for C at least one numeric
     value in "args";
  3. each (pid, tid) track: X events, taken by start time (longer first on ties), properly
     nested — an event starting inside another ends inside it, within 1e-3 us — so any overlap
     that is not nesting is reported with both events; B/E events, in file order, balanced and
     never moving back in time.
On success prints a summary (events per track) and exits 0; otherwise prints
"trace_check: FILE: event N (...): what is wrong" (N counts from 0 in traceEvents) to stderr and
exits 1. Standard library only.
"""
import json
import math
import sys

TOLERANCE_US = 1e-3

# Metadata names and the argument each must carry, with its type check.
METADATA = {
    "process_name": ("name", str),
    "process_labels": ("labels", str),
    "process_sort_index": ("sort_index", (int, float)),
    "thread_name": ("name", str),
    "thread_sort_index": ("sort_index", (int, float)),
    "num_cpus": ("number", (int, float)),
}
THREAD_PHASES = {"X", "B", "E"}
KNOWN_PHASES = set("XBEiICbneSTpFstfNODMPRc")


class TraceError(Exception):
    pass


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def describe(index, e):
    parts = [f"ph {e.get('ph')!r}"]
    for key in ("name", "pid", "tid", "ts"):
        if key in e:
            parts.append(f"{key} {e[key]!r}")
    return f"event {index} ({', '.join(parts)})"


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise TraceError(f"expected a readable file, got: {err.strerror}")
    except UnicodeDecodeError:
        raise TraceError("expected UTF-8 JSON text, got bytes that are not UTF-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        stripped = text.rstrip()
        if stripped.startswith("["):  # a streaming writer's array: no "]", maybe a last ","
            try:
                data = json.loads(stripped.rstrip(",") + "]")
            except json.JSONDecodeError:
                raise TraceError(f"expected JSON, got a parse error: {err}")
        else:
            raise TraceError(f"expected JSON, got a parse error: {err}")
    if isinstance(data, list):
        return data, "array form"
    if not isinstance(data, dict):
        raise TraceError("expected a JSON object with traceEvents or an array, got "
                         f"{type(data).__name__}")
    if "traceEvents" not in data:
        raise TraceError(f"expected the key 'traceEvents' in the object, got keys {sorted(data)}")
    events = data["traceEvents"]
    if not isinstance(events, list):
        raise TraceError(f"expected an array for 'traceEvents', got {type(events).__name__}")
    unit = data.get("displayTimeUnit", "ms")
    if unit not in ("ms", "ns"):
        raise TraceError(f"expected displayTimeUnit 'ms' or 'ns', got {unit!r}")
    return events, f"object form, displayTimeUnit {unit}"


def check_event(index, e):
    """Field checks of one event; raises TraceError naming it."""
    if not isinstance(e, dict):
        raise TraceError(f"event {index}: expected an object, got {json.dumps(e)[:60]}")
    where = describe(index, e)
    ph = e.get("ph")
    if not isinstance(ph, str) or ph not in KNOWN_PHASES:
        raise TraceError(f"{where}: expected a phase 'ph' of the format, got {ph!r}")
    global_instant = ph in ("i", "I") and e.get("s") == "g"
    if not global_instant:
        if "pid" not in e:
            raise TraceError(f"{where}: expected a 'pid'")
        if not (is_number(e["pid"]) or isinstance(e["pid"], str)):
            raise TraceError(f"{where}: expected a number or string for 'pid', got {e['pid']!r}")
    needs_tid = (ph in THREAD_PHASES or (ph in ("i", "I") and e.get("s", "t") == "t")
                 or (ph == "M" and str(e.get("name", "")).startswith("thread_")))
    if needs_tid:
        if "tid" not in e:
            raise TraceError(f"{where}: expected a 'tid'")
        if not (is_number(e["tid"]) or isinstance(e["tid"], str)):
            raise TraceError(f"{where}: expected a number or string for 'tid', got {e['tid']!r}")
    if ph != "E" and not isinstance(e.get("name"), str):
        raise TraceError(f"{where}: expected a string 'name', got {e.get('name')!r}")
    if ph != "M":
        if "ts" not in e:
            raise TraceError(f"{where}: expected a timestamp 'ts'")
        if not is_number(e["ts"]):
            raise TraceError(f"{where}: expected a finite number for 'ts' (microseconds), "
                             f"got {e['ts']!r}")
    if "args" in e and not isinstance(e["args"], dict):
        raise TraceError(f"{where}: expected an object for 'args', "
                         f"got {json.dumps(e['args'])[:60]}")
    if ph == "X":
        if "dur" not in e:
            raise TraceError(f"{where}: expected a duration 'dur' on an X event")
        if not is_number(e["dur"]) or e["dur"] < 0:
            raise TraceError(f"{where}: expected a non-negative number for 'dur', got {e['dur']!r}")
    elif ph == "M":
        if e["name"] not in METADATA:
            raise TraceError(f"{where}: expected a metadata name of the format "
                             f"({', '.join(METADATA)}), got {e['name']!r}")
        key, kind = METADATA[e["name"]]
        value = e.get("args", {}).get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            what = "a string" if kind is str else "a number"
            raise TraceError(f"{where}: expected args.{key} ({what}), got {value!r}")
    elif ph == "C":
        args = e.get("args", {})
        if not any(is_number(v) for v in args.values()):
            raise TraceError(f"{where}: expected at least one numeric value in 'args' of a "
                             f"counter, got {json.dumps(args)[:80]}")


def check_tracks(events):
    """Nesting of X events and balance of B/E events per (pid, tid); returns the track summary."""
    complete, begin_end = {}, {}
    for i, e in enumerate(events):
        if e["ph"] == "X":
            complete.setdefault((e["pid"], e["tid"]), []).append(i)
        elif e["ph"] in ("B", "E"):
            begin_end.setdefault((e["pid"], e["tid"]), []).append(i)

    def end_of(j):
        return events[j]["ts"] + events[j]["dur"]

    summary = {}
    for track, indices in complete.items():
        indices.sort(key=lambda i: (events[i]["ts"], -events[i]["dur"], i))
        stack, depth = [], 0
        for i in indices:
            e = events[i]
            start, end = e["ts"], e["ts"] + e["dur"]
            while stack and end_of(stack[-1]) <= start + TOLERANCE_US:  # ended before e starts
                stack.pop()
            if stack:
                outer, outer_end = events[stack[-1]], end_of(stack[-1])
                if end > outer_end + TOLERANCE_US:
                    raise TraceError(
                        f"{describe(i, e)}: overlaps {describe(stack[-1], outer)} without nesting: "
                        f"starts at {start} inside it, ends at {end}, after its end at {outer_end}")
            stack.append(i)
            depth = max(depth, len(stack))
        summary.setdefault(track, {})["X"] = (len(indices), depth)
    for track, indices in begin_end.items():
        stack, last_ts = [], None
        for i in indices:
            e = events[i]
            if last_ts is not None and e["ts"] < last_ts:
                raise TraceError(f"{describe(i, e)}: expected B/E timestamps not to move backward "
                                 f"on the track, got {e['ts']} after {last_ts}")
            last_ts = e["ts"]
            if e["ph"] == "B":
                stack.append(i)
                continue
            if not stack:
                raise TraceError(f"{describe(i, e)}: expected an open B event on the track to "
                                 "end, got none")
            b = stack.pop()
            if "name" in e and e["name"] != events[b]["name"]:
                raise TraceError(f"{describe(i, e)}: expected the name of the B event it ends, "
                                 f"{events[b]['name']!r}")
        if stack:
            raise TraceError(f"{describe(stack[-1], events[stack[-1]])}: expected an E event to "
                             "end it, got none before the end of the trace")
        summary.setdefault(track, {})["BE"] = len(indices) // 2
    return summary


def main(argv):
    if len(argv) != 2:
        print("usage: trace_check.py FILE.json", file=sys.stderr)
        return 2
    path = argv[1]
    try:
        events, form = load(path)
        for i, e in enumerate(events):
            check_event(i, e)
        tracks = check_tracks(events)
    except TraceError as err:
        print(f"trace_check: {path}: {err}", file=sys.stderr)
        return 1

    names = {}
    counters = {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "process_name":
            names[(e["pid"], None)] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e["ph"] == "C":
            key = (e["pid"], e["name"])
            counters[key] = counters.get(key, 0) + 1

    def label(pid, tid=None):
        n = names.get((pid, tid))
        text = f"pid {pid}" if tid is None else f"tid {tid}"
        return text + (f' "{n}"' if n else "")

    print(f"{path}: {len(events)} events ({form})")
    def order(v):  # numbers in numeric order, then strings
        return (0, v, "") if is_number(v) else (1, 0, str(v))

    for (pid, tid) in sorted(tracks, key=lambda t: (order(t[0]), order(t[1]))):
        t = tracks[(pid, tid)]
        parts = []
        if "X" in t:
            parts.append(f"{t['X'][0]} X (depth {t['X'][1]})")
        if "BE" in t:
            parts.append(f"{t['BE']} B/E")
        print(f"  {label(pid)} {label(pid, tid)}: {', '.join(parts)}")
    for (pid, name), n in sorted(counters.items(), key=lambda c: (order(c[0][0]), c[0][1])):
        print(f"  {label(pid)} counter \"{name}\": {n} samples")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
