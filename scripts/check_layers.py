#!/usr/bin/env python3
"""The include rule, checked: each folder is a layer and may include only its own headers
and those of the layers below it.

    kernels -> codec -> common -> {worker, server} -> {inprocess, python} -> {bench, tests}

(`muloco/v1/...`, the generated protocol, sits between codec and common.) worker and server
are peers and never include each other; inprocess (workers and an engine in one process) is
the one place that joins them; python (the Python package's native module) is a client of
worker; bench and tests sit on top. Inside a folder there are no back-edges: taking a header and
its .cc (or .cu) as one unit, the units' include graph has no cycle. Exits 1 and names
every include against the rule; run by .ci/run."""
import os
import re
import sys

LAYERS = {"kernels": 0, "codec": 1, "muloco": 1.5, "common": 2, "worker": 3, "server": 3,
          "inprocess": 4, "python": 4, "bench": 5, "tests": 5}
RULE = "kernels -> codec -> common -> {worker, server} -> {inprocess, python} -> {bench, tests}"
SOURCES = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def project_files(root):
    for folder in LAYERS:
        if folder == "muloco":
            continue
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in names:
                if name.endswith(SOURCES):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def unit(path):
    return os.path.splitext(path)[0]


def check(root):
    errors, edges = [], {}
    for path in sorted(project_files(root)):
        folder = path.split(os.sep)[0]
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            target = inc.split("/")[0]
            if target not in LAYERS:
                if "/" not in inc and os.path.exists(os.path.join(root, os.path.dirname(path), inc)):
                    target = folder  # a sibling included by bare name
                else:
                    continue  # a library's header (absl/..., gtest/...)
            if target != folder and LAYERS[target] >= LAYERS[folder]:
                errors.append(f"{path}: includes {inc}: {folder} may not include {target} "
                              f"({RULE})")
            if target == folder:
                dep = inc if "/" in inc else os.path.join(os.path.dirname(path), inc)
                if unit(dep) != unit(path):
                    edges.setdefault(unit(path), set()).add(unit(dep))
    errors += [f"back-edge inside a folder: {' -> '.join(cycle)}" for cycle in cycles(edges)]
    return errors


def cycles(edges):
    """One cycle per strongly connected component of more than one unit (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp) + [sorted(comp)[0]])

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} include(s) against the rule")
        return 1
    print("check_layers: every include follows the rule")
    return 0


if __name__ == "__main__":
    sys.exit(main())
