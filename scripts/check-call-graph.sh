#!/bin/sh
# Fails, naming the files and the symbols, if the source files of one of
# the folders below call each other in a circle: a.c calls (or takes the
# address of, or reads) something b.c defines, and b.c, directly or by
# way of other files of the folder, something a.c defines.  Within each
# folder the files must call one way, so that each can be read knowing only
# the files below it (docs/architecture.md, docs/onednn.md).  The calls are
# read from the object files of a build (`nm`: which file defines each
# global symbol, which files use it), so they are what the compiler saw,
# macros and inline functions included; a call through a function pointer
# set at run time is not seen.  CI runs it after `make test`.
#
# usage: sh scripts/check-call-graph.sh [-v] [BUILD]
#   BUILD  the build folder (default: build); it must be up to date
#   -v     also prints each folder's files by level: level 0 calls no other
#          file of the folder, level k only files of levels below k
set -eu
cd "$(dirname "$0")/.."
verbose=0
if [ "${1:-}" = "-v" ]; then
    verbose=1
    shift
fi
build=${1:-build}
folders="src/backend/onednn src/data"
objdir=$build/CMakeFiles/classic_obj.dir
nm=${NM:-nm}
status=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for dir in $folders; do
    # The objects of the folder's sources (an object whose source is gone
    # is left out), each no older than its source.
    list=
    for src in "$dir"/*.c; do
        obj=$objdir/$src.o
        if [ ! -f "$obj" ]; then
            echo "check-call-graph: no $obj; build $build first" >&2
            exit 2
        fi
        if [ "$src" -nt "$obj" ]; then
            echo "check-call-graph: $src is newer than $obj; build $build" \
                "first" >&2
            exit 2
        fi
        list="$list $obj"
    done
    # "D file symbol" for each global symbol a file defines, "U file
    # symbol" for each it uses (nm -P: name, type, ...).
    for obj in $list; do
        f=$(basename "$obj" .o)
        $nm -P -g "$obj" | awk -v f="$f" '
            $2 == "U" || $2 == "w" || $2 == "v" { print "U", f, $1; next }
            { print "D", f, $1 }'
    done >"$tmp"
    if out=$(awk -v dir="$dir" -v verbose="$verbose" '
        $1 == "D" { def[$3] = $2; files[$2] = 1; next }
        { nu++; uf[nu] = $2; us[nu] = $3; files[$2] = 1 }
        END {
            n = 0
            for (f in files)
                name[++n] = f
            for (i = 2; i <= n; i++) { # sorted, for a stable report
                v = name[i]
                for (j = i - 1; j >= 1 && name[j] > v; j--)
                    name[j + 1] = name[j]
                name[j + 1] = v
            }
            for (i = 1; i <= n; i++)
                id[name[i]] = i
            ne = 0
            for (k = 1; k <= nu; k++) {
                if (!(us[k] in def))
                    continue
                a = id[uf[k]]; b = id[def[us[k]]]
                if (a == b)
                    continue
                if (!((a, b) in sym)) {
                    sym[a, b] = us[k]
                    ne++
                } else
                    sym[a, b] = sym[a, b] " " us[k]
                adj[a, b] = 1; reach[a, b] = 1
            }
            for (k = 1; k <= n; k++) # transitive closure
                for (i = 1; i <= n; i++)
                    if ((i, k) in reach)
                        for (j = 1; j <= n; j++)
                            if ((k, j) in reach)
                                reach[i, j] = 1
            bad = 0
            for (i = 1; i <= n; i++) {
                if (!((i, i) in reach) || (i in done))
                    continue
                # The files in a circle with file i, and the shortest
                # circle through any of them (breadth first from each).
                m = 0
                for (j = 1; j <= n; j++)
                    if (j == i || (((i, j) in reach) && ((j, i) in reach))) {
                        mem[++m] = j; done[j] = 1; inc[j] = i
                    }
                best = 0
                for (q = 1; q <= m; q++) {
                    s = mem[q]
                    split("", dist); split("", prev)
                    dist[s] = 0; head = 1; tail = 1; queue[1] = s; len = 0
                    while (head <= tail && !len) {
                        u = queue[head++]
                        for (r = 1; r <= m && !len; r++) {
                            w = mem[r]
                            if (!((u, w) in adj))
                                continue
                            if (w == s) {
                                len = dist[u] + 1; last = u
                            } else if (!(w in dist)) {
                                dist[w] = dist[u] + 1; prev[w] = u
                                queue[++tail] = w
                            }
                        }
                    }
                    if (len && (!best || len < best)) {
                        best = len; c = 0
                        for (u = last; u != s; u = prev[u])
                            rev[++c] = u
                        cyc[1] = s
                        for (r = c; r >= 1; r--)
                            cyc[c - r + 2] = rev[r]
                    }
                }
                bad = 1
                printf "%s: files call each other in a circle:\n", dir
                for (r = 1; r <= best; r++) {
                    a = cyc[r]; b = cyc[r % best + 1]
                    printf "  %s -> %s (%s)\n", name[a], name[b], sym[a, b]
                }
                line = ""
                for (q = 1; q <= m; q++)
                    line = line " " name[mem[q]]
                printf "  files in this circle (%d):%s\n", m, line
            }
            if (bad)
                exit 1
            printf "%s: %d files, %d file dependencies, all one way\n", \
                dir, n, ne
            if (!verbose)
                exit 0
            for (i = 1; i <= n; i++)
                lev[i] = 0
            for (pass = 1; pass <= n; pass++)
                for (i = 1; i <= n; i++)
                    for (j = 1; j <= n; j++)
                        if (((i, j) in adj) && lev[j] + 1 > lev[i])
                            lev[i] = lev[j] + 1
            for (l = 0; l < n; l++) {
                line = ""
                for (i = 1; i <= n; i++)
                    if (lev[i] == l)
                        line = line " " name[i]
                if (line != "")
                    printf "  level %d:%s\n", l, line
            }
        }' "$tmp"); then
        printf '%s\n' "$out"
    else
        printf '%s\n' "$out" >&2
        status=1
    fi
done
exit $status
