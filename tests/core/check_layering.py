#!/usr/bin/env python3
"""The library's files call each other without cycles: from the symbols
each object file of librnnd.a defines and uses (nm), the graph of "file A
calls a function (or reads a table) defined in file B" must be acyclic, so
calls only go one way (main -> trainer -> step -> backend -> kernels, with
comm, data, model, config and io below). Prints every cycle it finds (as
the strongly connected files) and, for reading, the files in an order where
each calls only files listed before it.

usage: check_layering.py LIBRNND_A"""
import collections
import subprocess
import sys

library = sys.argv[1]
out = subprocess.run(["nm", "-A", library], capture_output=True, text=True, check=True).stdout
defined, used = {}, collections.defaultdict(set)
for line in out.splitlines():
    # "librnnd.a:trainer.c.o:                 U step_load" or "...:0000000000000000 T trainer_run"
    head, _, rest = line.rpartition(":")
    member = head.split(":")[-1]
    fields = rest.split()
    if len(fields) < 2:
        continue
    kind, symbol = fields[-2], fields[-1]
    name = member.replace(".o", "")
    if kind == "U":
        used[name].add(symbol)
    elif kind in "TDBRtdbr" and kind.isupper():
        defined[symbol] = name
files = sorted(set(defined.values()) | set(used))
calls = {f: sorted({defined[s] for s in used[f] if s in defined and defined[s] != f}) for f in files}

# Tarjan's strongly connected components
index, low, stack, on_stack, sccs, counter = {}, {}, [], set(), [], [0]


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on_stack.add(v)
    for w in calls[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on_stack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        component = []
        while True:
            w = stack.pop()
            on_stack.discard(w)
            component.append(w)
            if w == v:
                break
        sccs.append(component)


sys.setrecursionlimit(10000)
for f in files:
    if f not in index:
        visit(f)
cycles = [sorted(c) for c in sccs if len(c) > 1]
# sccs come out callees first: a bottom-up order of the files
print("files, each calling only files above it:")
for component in sccs:
    for f in component:
        print(f"  {f:24s} -> {', '.join(calls[f]) if calls[f] else '(nothing in the library)'}")
for c in cycles:
    print("FAIL files calling each other in a cycle: " + ", ".join(c))
print(f"{len(files)} files, {sum(len(v) for v in calls.values())} file-to-file edges, {len(cycles)} cycles")
print(f"{0 if cycles else 1} passed, {1 if cycles else 0} failed")
sys.exit(1 if cycles else 0)
