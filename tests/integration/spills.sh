#!/usr/bin/env bash
# Register spills of the CUDA kernels: ptxas's report of every function (the build keeps it
# beside each kernel object, kernels/NAME.o.ptxas) against tests/fixtures/spills.txt, the spills
# accepted so far. A kernel not in the list that spills fails, as does one in the list that
# spills more, or less, or is gone (the list must say what the build does). A spill that slipped
# into the fused MLP once cost the 8B's decode step 0.06 ms a token unseen for a session
# (docs/BENCHMARKS.md, forty-eighth session). The list is for sm_90a, the default arch; another
# arch, or a build without CUDA, skips.
. "$(dirname "$0")/lib.sh"

list=$SRCDIR/tests/fixtures/spills.txt
if ! grep -q '^#define HAVE_CUDA 1' "$BUILDDIR/config.h"; then
    skip "kernel spills (a build without CUDA)"
    done_testing
    exit
fi
# an object built before the rule kept its report (an older build tree) has none: say which
missing=()
for o in "$BUILDDIR"/kernels/*.o; do
    case $o in *.sm80.o) continue ;; esac
    [ -f "$SRCDIR/kernels/$(basename "$o" .o).cu" ] && [ ! -f "$o.ptxas" ] && missing+=("$(basename "$o")")
done
if [ ${#missing[@]} -gt 0 ]; then
    not_ok "kernel spills: no ptxas report beside ${missing[*]} (built before the .cu.o rule kept one: remove them and build again)"
    done_testing
    exit
fi
reports=("$BUILDDIR"/kernels/*.o.ptxas)
if [ ! -f "${reports[0]}" ]; then
    not_ok "kernel spills: no ptxas report under $BUILDDIR/kernels (the .cu.o rule writes them)"
    done_testing
    exit
fi
if ! grep -q "for 'sm_90a'" "${reports[@]}"; then
    skip "kernel spills (the list is for sm_90a; this build is for another arch)"
    done_testing
    exit
fi

# every sm_90a function of every report (a build for more archs reports each once an arch):
# object, function, spill stores, spill loads
for r in "${reports[@]}"; do
    awk -v obj="$(basename "$r" .o.ptxas)" '
        /Compiling entry function/ { arch = $NF; gsub(/\047/, "", arch) }
        /Function properties for/ { name = $NF }
        /bytes spill stores/ && arch == "sm_90a" { print obj, name, $5 + 0, $9 + 0 }' "$r"
done >"$tmp/found"
n=$(wc -l <"$tmp/found")
check "ptxas reported functions ($n in ${#reports[@]} objects)" test "$n" -gt 100

awk 'NR == FNR { if ($0 !~ /^#/ && NF == 4) want[$1 " " $2] = $3 " " $4; next }
     { key = $1 " " $2; got = $3 " " $4
       if (key in want) {
           if (got != want[key]) print "changed: " key ": spills " got " (stores, loads), the list says " want[key]
           seen[key] = 1
       } else if ($3 > 0 || $4 > 0) print "new: " key ": spills " got " (stores, loads)" }
     END { for (k in want) if (!(k in seen)) print "gone: " k }' "$list" "$tmp/found" >"$tmp/out"
listed=$(grep -cv '^#' "$list")
if [ -s "$tmp/out" ]; then
    not_ok "every kernel's spills as tests/fixtures/spills.txt lists them ($listed listed)"
    diag <"$tmp/out"
else
    ok "every kernel's spills as tests/fixtures/spills.txt lists them ($listed listed, the rest none)"
fi
done_testing
