#!/usr/bin/env python3
"""Build events.jsonl and occurrences.jsonl from the shared k8s-events corpus.

    python3 examples/data/expand.py /path/to/shared/data/k8s-events examples/data

Python 3.11 standard library only; the output is deterministic (byte-identical
on every run).

events.jsonl      real Event objects from the Apache-2.0 sources, unchanged
                  (each line copied byte for byte from derived/<id>.jsonl),
                  ordered by time (lastTimestamp, else eventTime, else
                  firstTimestamp; ties keep source order, then line order).
                  Sample rules:
                  * objects without metadata are skipped: the only ones are
                    3 hand-written events from a sample bundle in
                    replicated-troubleshoot (names like "...-xyz12");
                  * one snapshot per metadata.uid: the one with the highest
                    (count, resourceVersion, has apiVersion); ties keep the
                    first line;
                  * replicated-troubleshoot-ci-baselines (2.5 MB of
                    near-identical k3s boot sequences) is split into CI runs
                    at gaps of more than 5 minutes and only every other run
                    (1st, 3rd, ...) is kept, to stay under about 3 MB.
occurrences.jsonl each Event of count N (count, deprecatedCount or
                  series.count; missing/0 = 1) becomes min(N, CAP)
                  core/v1 Events with count 1, as client-go's EventRecorder
                  would emit them, spread evenly from first to last timestamp,
                  merged into one stream ordered by occurrence time (stable);
                  each is named "<involvedObject.name>.<hex unix nanos>" as the
                  recorder names it, the hex raised by one while that
                  (namespace, name) is taken, so that every name is unique.
"""
import calendar
import json
import os
import re
import sys
import time

# Only Apache-2.0 sources, in tie-break order.
SOURCES = [
    "sonobuoy",
    "replicated-troubleshoot",
    "replicated-troubleshoot-ci-baselines",
    "replicated-troubleshoot-mcp-server",
    "replicated-sbctl",
    "sumologic-fluent-plugin-events",
    "openshift-must-gather-clean",
]
CI_SOURCE = "replicated-troubleshoot-ci-baselines"
CI_RUN_GAP_NS = 300 * 10**9
CAP = 300

TS = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def nanos(s):
    """RFC3339 string -> unix nanoseconds (None for null/empty)."""
    if not s:
        return None
    m = TS.match(s)
    if not m:
        raise ValueError(f"bad timestamp {s!r}")
    secs = calendar.timegm(tuple(int(g) for g in m.groups()[:6]))
    if m[8] != "Z":
        off = int(m[8][1:3]) * 3600 + int(m[8][4:6]) * 60
        secs -= off if m[8][0] == "+" else -off
    return secs * 10**9 + int((m[7] or "")[:9].ljust(9, "0"))


def rfc3339(ns):
    s, frac = divmod(ns, 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + f".{frac:09d}Z"


def core_v1(o):
    """View an events.k8s.io object with core/v1 field names."""
    if "regarding" not in o:
        return o
    return {
        "metadata": o.get("metadata", {}),
        "involvedObject": o["regarding"],
        "reason": o.get("reason"),
        "message": o.get("note"),
        "source": o.get("deprecatedSource"),
        "firstTimestamp": o.get("deprecatedFirstTimestamp"),
        "lastTimestamp": o.get("deprecatedLastTimestamp"),
        "count": o.get("deprecatedCount"),
        "type": o.get("type"),
        "eventTime": o.get("eventTime"),
        "series": o.get("series"),
        "reportingComponent": o.get("reportingController"),
        "reportingInstance": o.get("reportingInstance"),
    }


def count(v):
    return v.get("count") or (v.get("series") or {}).get("count") or 1


def sort_key(v):
    t = nanos(v.get("lastTimestamp") or v.get("eventTime") or v.get("firstTimestamp"))
    if t is None:
        raise ValueError(f"event without any timestamp: {v['metadata']}")
    return t


def span(v):
    """(first, last) occurrence time in unix nanos."""
    first, last = nanos(v.get("firstTimestamp")), nanos(v.get("lastTimestamp"))
    if first is None and last is None:  # new-style event: eventTime [.. series.lastObservedTime]
        first = nanos(v.get("eventTime"))
        last = nanos((v.get("series") or {}).get("lastObservedTime"))
    first = first if first is not None else last
    last = last if last is not None else first
    return first, last


def occurrence(v, t, used):
    """The occurrence of event v at time t (unix nanos). Its name is client-go's
    "<involvedObject.name>.<hex unix nanos>", unique in the stream as a recorder's are: when
    (namespace, name) is taken (same object name, same time), the hex goes up by one until it
    is free. `used` holds the (namespace, name) pairs given so far."""
    io = v["involvedObject"]
    md = v.get("metadata") or {}
    ts = rfc3339(t)
    namespace = md.get("namespace") or "default"
    unique = t
    while (namespace, f"{io.get('name', '')}.{unique:x}") in used:
        unique += 1
    name = f"{io.get('name', '')}.{unique:x}"
    used.add((namespace, name))
    e = {"metadata": {"name": name, "namespace": namespace}, "involvedObject": io}
    for k in ("reason", "message"):  # omitempty in core/v1
        if v.get(k):
            e[k] = v[k]
    e["source"] = v.get("source") or {}
    e.update(firstTimestamp=ts, lastTimestamp=ts, count=1)
    if v.get("type"):
        e["type"] = v["type"]
    e["eventTime"] = None
    e["reportingComponent"] = v.get("reportingComponent") or ""
    e["reportingInstance"] = v.get("reportingInstance") or ""
    return e


def load(src_dir):
    manifest = {s["source_id"]: s for s in json.load(open(os.path.join(src_dir, "MANIFEST.json")))}
    rows = []  # (source, raw line, object, core/v1 view)
    for src in SOURCES:
        assert manifest[src]["license"] == "Apache-2.0", src
        with open(os.path.join(src_dir, "derived", src + ".jsonl"), encoding="utf-8") as f:
            for line in f:
                o = json.loads(line)
                if "metadata" in o:
                    rows.append((src, line.rstrip("\n"), o, core_v1(o)))
    return rows


def sample(rows):
    best = {}  # uid -> ((count, resourceVersion, has apiVersion), row index)
    for i, (_, _, o, v) in enumerate(rows):
        uid = v["metadata"].get("uid")
        if uid:
            k = (count(v), int(v["metadata"].get("resourceVersion") or 0), "apiVersion" in o)
            if uid not in best or k > best[uid][0]:
                best[uid] = (k, i)
    rows = [r for i, r in enumerate(rows) if not r[3]["metadata"].get("uid") or best[r[3]["metadata"]["uid"]][1] == i]

    ci = sorted((r for r in rows if r[0] == CI_SOURCE), key=lambda r: sort_key(r[3]))
    runs, prev = [], None
    for r in ci:
        t = sort_key(r[3])
        if prev is None or t - prev > CI_RUN_GAP_NS:
            runs.append([])
        runs[-1].append(r)
        prev = t
    dropped = {id(r) for run in runs[1::2] for r in run}
    rows = [r for r in rows if id(r) not in dropped]
    return sorted(rows, key=lambda r: sort_key(r[3]))  # stable


def main(src_dir, out_dir):
    events = sample(load(src_dir))
    with open(os.path.join(out_dir, "events.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for r in events:
            f.write(r[1] + "\n")

    occ = []  # (time, event index, i)
    for idx, (_, _, _, v) in enumerate(events):
        n = min(count(v), CAP)
        first, last = span(v)
        occ.extend((first if n == 1 else first + (last - first) * i // (n - 1), idx, i) for i in range(n))
    occ.sort()
    used = set()
    with open(os.path.join(out_dir, "occurrences.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for t, idx, _ in occ:
            e = occurrence(events[idx][3], t, used)
            f.write(json.dumps(e, separators=(",", ":"), ensure_ascii=False) + "\n")
    print(f"{len(events)} events, {len(occ)} occurrences (cap {CAP})", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
