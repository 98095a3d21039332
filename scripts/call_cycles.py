#!/usr/bin/python3
"""Circles of calls between the library's source files, found in the built
objects: for every OBJDIR/MODULE/FILE.o (default build/obj; cli/ is not the
library and is left out), `nm` says which symbols the object defines and
which it uses; file A calls file B when A uses a symbol B defines. A circle
(A calls B ... calls A, over two files or more) is a strongly connected
component of that graph; each is printed with the calls inside it.

    /usr/bin/python3 scripts/call_cycles.py [OBJDIR]

Exit 0: no circle; 1: circles (listed); 2: no objects or nm missing.
Why objects and not the sources: the compiler has resolved every name, so a
macro, a static function of the same name or a comment cannot fool it. Data
symbols count too: a file that reads another's table depends on it.
Standard library only."""
import collections
import glob
import os
import subprocess
import sys


def graph(objdir):
    objs = sorted(o for o in glob.glob(os.path.join(objdir, '*', '*.o'))
                  if os.path.basename(os.path.dirname(o)) != 'cli')
    if not objs:
        return None
    defs, uses = {}, collections.defaultdict(set)
    for o in objs:
        name = os.path.relpath(o, objdir)[:-2] + '.c'
        out = subprocess.run(['nm', o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            p = line.split()
            if len(p) == 2 and p[0] == 'U':
                uses[name].add(p[1])
            elif len(p) == 3 and p[1] in 'TDBRGSVWC':
                defs[p[2]] = name
        uses.setdefault(name, set())
    calls = {f: collections.defaultdict(set) for f in uses}
    for f, syms in uses.items():
        for s in syms:
            g = defs.get(s)
            if g is not None and g != f:
                calls[f][g].add(s)
    return calls


def circles(calls):
    """Tarjan's strongly connected components of more than one file, iteratively."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], 0
    for root in sorted(calls):
        if root in index:
            continue
        work = [(root, iter(sorted(calls[root])))]
        index[root] = low[root] = n
        n += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(calls[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def main():
    objdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get('BUILD', 'build'), 'obj')
    try:
        calls = graph(objdir)
    except (OSError, subprocess.CalledProcessError) as e:
        print('call_cycles: %s' % e, file=sys.stderr)
        return 2
    if calls is None:
        print('call_cycles: no objects under %s/*/ (build first)' % objdir, file=sys.stderr)
        return 2
    found = circles(calls)
    for comp in found:
        print('circle: ' + ' '.join(comp))
        for a in comp:
            for b in sorted(calls[a]):
                if b in comp:
                    print('    %s -> %s: %s' % (a, b, ', '.join(sorted(calls[a][b]))))
    if found:
        return 1
    print('call_cycles: no circle of calls among %d files' % len(calls))
    return 0


if __name__ == '__main__':
    sys.exit(main())
