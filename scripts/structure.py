#!/usr/bin/env python3
"""The structure figures issues 21 and 39 asked for, rerunnable: functions over 100 and 120
lines (tests apart), imports between top-level modules that close a cycle (arrows back up),
imports that point up lib.rs's map, engine writes outside the executor, files over 800
lines of production code, state-folder names joined outside core/layout.rs, and unit tests
of the I/O layers (execute, observe, runtime, app).

Usage: python3 scripts/structure.py [--top N]
"""
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
FN = re.compile(r'^(\s*)(pub(\([^)]*\))?\s+)?(async\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)')
# The binary's edge, which may import anything of the library.
EDGE = {"main", "cli", "commands", "logging", "lib"}
# Names of the state folder's files and folders (core/layout.rs owns them).
# Modules whose home is not their layer, measured as the layer src/lib.rs's map puts them in:
# the helper server lives in `servers` beside the egress proxy, but converges with apply.
LAYER_OF = {"servers/helper/server": "app"}
STATE_NAMES = ["go", "secrets", "tmux.sock", "proxy.err", "restarts", "sessions", "ctl",
               "record.json", "policy.json", "proxy.sock", "helpers.sock", "events.jsonl"]


def test_only_files():
    """Files declared as `#[cfg(test)] mod name;` (the fake backend, test rigs, tests.rs)."""
    out = set()
    for d, _, fs in os.walk(SRC):
        for f in fs:
            if not f.endswith(".rs"):
                continue
            p = os.path.join(d, f)
            lines = open(p).read().split("\n")
            here = d if f in ("mod.rs", "lib.rs", "main.rs") else os.path.join(d, f[:-3])
            for i, l in enumerate(lines[1:], 1):
                m = re.match(r'^\s*(pub(\([^)]*\))?\s+)?mod (\w+);', l)
                if m and "cfg(test)" in lines[i - 1]:
                    out.add(os.path.join(here, m.group(3) + ".rs"))
                    out.add(os.path.join(here, m.group(3), "mod.rs"))
    return out


def rust_files():
    skip = test_only_files()
    for d, _, fs in os.walk(SRC):
        for f in fs:
            p = os.path.join(d, f)
            if f.endswith(".rs") and p not in skip:
                yield p


def code_lines(path):
    """The file's lines before its `#[cfg(test)] mod` (test files: none)."""
    if os.path.basename(path) == "tests.rs" or "/tests/" in path:
        return []
    lines = open(path).read().split("\n")
    for i, l in enumerate(lines):
        if re.match(r'^\s*mod \w+\s*(\{|;)', l) and i > 0 and "cfg(test)" in lines[i - 1]:
            if l.rstrip().endswith("{"):
                return lines[:i]
    return lines


def functions():
    out = []
    for p in rust_files():
        lines = code_lines(p)
        for i, l in enumerate(lines):
            m = FN.match(l)
            if not m or l.rstrip().endswith("{}"):
                continue
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith(("{", ";", "{}")):
                j += 1
            if j >= len(lines) or not lines[j].rstrip().endswith("{"):
                continue
            k = j + 1
            while k < len(lines) and lines[k] != m.group(1) + "}":
                k += 1
            out.append((k - i + 1, os.path.relpath(p, SRC), m.group(7), i + 1))
    return sorted(out, reverse=True)


def unit(path):
    """The module a file (`a/b/c.rs`) or an import (`a/b/c`) is measured as: its top-level
    module, or the layer `LAYER_OF` names."""
    for home, layer in LAYER_OF.items():
        if path == home or path.startswith(home + "/") or path == home + ".rs":
            return layer
    return path.split("/")[0].removesuffix(".rs")


def imports():
    """Every `crate::x` a top-level module's code (not its comments, not its tests) names."""
    found = {}
    for p in rust_files():
        rel = os.path.relpath(p, SRC)
        me = unit(rel)
        if me in EDGE:
            continue
        for n, l in enumerate(code_lines(p), 1):
            if l.strip().startswith("//"):
                continue
            for m in re.finditer(r'crate::(\w+(?:::\w+)*)', l):
                to = unit(m.group(1).replace("::", "/"))
                if to != me:
                    found.setdefault((me, to), []).append(f"{rel}:{n}")
    return found


def map_layers():
    """The layers of src/lib.rs's map, top first: each bullet's modules (`a` and `b`: ...)."""
    text = open(os.path.join(SRC, "lib.rs")).read()
    bullets = re.findall(r'^//! - (.*(?:\n//!   .*)*)', text, flags=re.M)
    layers = []
    for b in bullets:
        head = b.split(":", 1)[0]
        names = re.findall(r'`(\w+)`', head) + re.findall(r'; `(\w+)`:', b)
        layers.append(names)
    return {n: i for i, names in enumerate(layers) for n in names}


def arrows_up():
    """Imports of a module listed higher in lib.rs's map than the one importing it."""
    layer = map_layers()
    return sorted(f"{a} -> {b} ({', '.join(at[:3])})" for (a, b), at in imports().items()
                  if a in layer and b in layer and layer[b] < layer[a])


def arrows_in_cycles():
    """The imports between top-level modules that close a cycle (an arrow that runs back up
    whichever way the map is drawn), found as the edges inside a strongly connected group."""
    found = imports()
    graph = {}
    for a, b in found:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, group = {}, {}, [], set(), {}

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            while True:
                w = stack.pop()
                on.discard(w)
                group[w] = v
                if w == v:
                    break

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(f"{a} -> {b} ({', '.join(at[:3])}{' ...' if len(at) > 3 else ''})"
                  for (a, b), at in found.items() if group[a] == group[b])


def state_joins():
    found = []
    names = "|".join(re.escape(n) for n in STATE_NAMES)
    pat = re.compile(r'\.join\("(' + names + r')"\)')
    for p in rust_files():
        rel = os.path.relpath(p, SRC)
        if rel == "core/layout.rs":
            continue
        for n, l in enumerate(code_lines(p), 1):
            if pat.search(l):
                found.append(f"{rel}:{n} {l.strip()}")
    return found


# Calls that change what the engine runs: the executor's (`execute/`) alone, through the
# runtime it drives (`runtime/`, `sessions.rs` for a promotion) and the engines themselves.
ENGINE_WRITE = re.compile(r'\b(?:backend|engine)\s*\.\s*(create|start|stop|remove|rename|pause|'
                          r'unpause|kill|remove_network|create_network|pull|exec_start)\(')
WRITERS = {"execute", "runtime", "backend", "sessions"}


def writes_outside_executor():
    """Engine writes in production code outside the executor and what it drives."""
    found = []
    for p in rust_files():
        rel = os.path.relpath(p, SRC)
        if rel.split("/")[0].removesuffix(".rs") in WRITERS:
            continue
        for n, l in enumerate(code_lines(p), 1):
            if not l.strip().startswith("//") and ENGINE_WRITE.search(l):
                found.append(f"{rel}:{n} {l.strip()}")
    return found


def long_files(limit=800):
    """Files with more than `limit` lines of production code (their tests apart)."""
    out = []
    for p in rust_files():
        n = len(code_lines(p))
        if n > limit:
            out.append((n, os.path.relpath(p, SRC)))
    return sorted(out, reverse=True)


def io_unit_tests():
    counts = {}
    for p in (os.path.join(d, f) for d, _, fs in os.walk(SRC) for f in fs if f.endswith(".rs")):
        rel = os.path.relpath(p, SRC)
        top = unit(rel)
        if top not in ("execute", "observe", "runtime", "app"):
            continue
        text = open(p).read()
        counts[top] = counts.get(top, 0) + len(re.findall(r'#\[(tokio::)?test\b', text))
    return counts


def main():
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 10
    fns = functions()
    for n, p, name, line in fns[:top]:
        print(f"{n:5d}  {p}:{line} {name}")
    print(f"functions: {len(fns)}; over 100 lines: {sum(1 for f in fns if f[0] > 100)}; "
          f"over 120: {sum(1 for f in fns if f[0] > 120)}")
    up = arrows_in_cycles()
    print(f"imports between top-level modules that close a cycle: {len(up)}")
    for u in up:
        print("  " + u)
    up = arrows_up()
    print(f"imports that point up lib.rs's map: {len(up)}")
    for u in up:
        print("  " + u)
    writes = writes_outside_executor()
    print(f"engine writes outside the executor: {len(writes)}")
    for w in writes:
        print("  " + w)
    long = long_files()
    print(f"files over 800 lines of production code: {len(long)}")
    for n, p in long:
        print(f"  {n:5d}  {p}")
    joins = state_joins()
    print(f"state-folder names joined outside core/layout.rs: {len(joins)}")
    for j in joins:
        print("  " + j)
    print("unit tests of the I/O layers: " +
          ", ".join(f"{k} {v}" for k, v in sorted(io_unit_tests().items())))


if __name__ == "__main__":
    main()
