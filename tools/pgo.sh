#!/usr/bin/env bash
# pgo.sh: rebuild cmd/mosaic/default.pgo, the CPU profile that `go build` uses to optimise the
# mosaic binary (profile-guided optimisation: hot calls inlined, hot interface calls made
# direct). It profiles the runs whose speed docs/performance.md promises, with the binary given
# (default bin/mosaic; `make pgo` builds it first):
#
#   - a million online MoA queries streamed with their results written (the research-scale run),
#   - one seed of the 1,000-point GPQA sweep (100 points, their results written),
#   - the quick start (`make run`),
#
# and merges the three profiles. The profile changes the machine code only, never what a run
# computes: rebuild it after large changes to the simulator's hot paths and check the outputs
# and figures as docs/performance.md describes.
#
#   tools/pgo.sh [BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-bin/mosaic}
go=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run NAME ARGS...: one profiled run, its log shown only when it fails.
run() {
	local name=$1
	shift
	"$bin" "$@" --cpuprofile "$tmp/$name.prof" >/dev/null 2>"$tmp/$name.log" || { cat "$tmp/$name.log" >&2; exit 1; }
}
echo "profiling a million online queries (about 15 s) ..." >&2
run online sim experiments/examples/online-moa.toml --set workload.queries=1000000 \
	--set workload.arrival_rate=0.5 --policy online -o "$tmp/online"
echo "profiling 100 points of the GPQA sweep ..." >&2
run sweep sim experiments/paper/gpqa.toml -o "$tmp/sweep" \
	--sweep aggregation.threshold=0.5,0.6,0.6667,0.7,0.75,0.8,0.9,1.0,1.5,2.0 \
	--sweep cluster.workers=2,3,4,5,6,7,8,9,10,12
echo "profiling the quick start ..." >&2
run quick sim
"$go" tool pprof -proto "$tmp/online.prof" "$tmp/sweep.prof" "$tmp/quick.prof" >"$tmp/default.pgo"
mv "$tmp/default.pgo" cmd/mosaic/default.pgo
echo "wrote cmd/mosaic/default.pgo ($(wc -c <cmd/mosaic/default.pgo) bytes)" >&2
