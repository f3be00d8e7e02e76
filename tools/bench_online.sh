#!/usr/bin/env bash
# bench_online.sh: the whole-process figure of a large online run: `mosaic sim` of the
# online MoA example (the online policy, 0.5 query/s, results written with -o), its wall time
# and peak resident memory (GNU time's %M), for each query count and binary.
#
#   tools/bench_online.sh [BIN ...]           (default: bin/mosaic; make bench-online builds it)
#   QUERIES="100000 1000000 10000000" REPEAT=3 tools/bench_online.sh bin/mosaic /tmp/mosaic-old
#
# With several binaries the runs alternate (each count: binary 1, binary 2, ..., REPEAT
# times), so that the figures compared are measured in one sitting on the same machine; the
# last lines give each binary's median per count, and each later binary's wall-time ratio to
# the first within each alternation (a pair measured seconds apart): their median, range and
# how many pairs were faster. The machine's speed drifts between hours by more than most
# changes gain, so the ratios of many short pairs (say QUERIES=300000 REPEAT=20) tell a change
# of a few percent where medians of long runs cannot. Results go to a temporary folder, removed.
#
# TOML=FILE runs another experiment file: a build older than the example's current keys needs
# the file of its own commit (git show b0fd06a:experiments/examples/online-moa.toml >FILE).
# WRITE=0 runs without -o (no results written).
set -euo pipefail
cd "$(dirname "$0")/.."
QUERIES=${QUERIES:-"100000 1000000"}
REPEAT=${REPEAT:-1}
RATE=${RATE:-0.5}
TOML=${TOML:-experiments/examples/online-moa.toml}
WRITE=${WRITE:-1}
[ -f "$TOML" ] || { echo "bench_online.sh: TOML=$TOML: no such file" >&2; exit 1; }
case $WRITE in 0 | 1) ;; *) echo "bench_online.sh: WRITE=$WRITE: want 0 or 1" >&2; exit 1 ;; esac
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(bin/mosaic)
if [ ! -x /usr/bin/time ]; then
	echo "bench_online.sh needs GNU time (/usr/bin/time; apt-get install time)" >&2
	exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $TOML, results written: $WRITE"
printf '%-28s %10s %4s %9s %9s %13s\n' binary queries run wall_s cpu_s peak_rss_MiB
rows=()
for q in $QUERIES; do
	for r in $(seq "$REPEAT"); do
		for b in "${bins[@]}"; do
			rm -rf "$out/run"
			dest=()
			[ "$WRITE" = 0 ] || dest=(-o "$out/run")
			/usr/bin/time -f '%e %U %S %M' -o "$out/time" "$b" sim "$TOML" \
				--set workload.queries="$q" --set workload.arrival_rate="$RATE" --policy online "${dest[@]}" \
				>/dev/null 2>"$out/log" || { cat "$out/log" >&2; exit 1; }
			read -r wall user sys rss <"$out/time"
			cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
			mib=$((rss / 1024))
			printf '%-28s %10s %4s %9s %9s %13s\n' "$b" "$q" "$r" "$wall" "$cpu" "$mib"
			rows+=("$b $q $wall $cpu $mib")
		done
	done
done
echo "medians:"
for q in $QUERIES; do
	for b in "${bins[@]}"; do
		printf '%s\n' "${rows[@]}" | awk -v b="$b" -v q="$q" '$1 == b && $2 == q { print $3, $4, $5 }' |
			sort -n | awk -v b="$b" -v q="$q" '{ w[NR] = $1; c[NR] = $2; m[NR] = $3 } END {
				i = int((NR + 1) / 2); printf "%-28s %10s      %9s %9s %13s\n", b, q, w[i], c[i], m[i] }'
	done
done
if [ ${#bins[@]} -gt 1 ]; then
	echo "ratios to ${bins[0]} (wall time, pair by pair):"
	for q in $QUERIES; do
		for b in "${bins[@]:1}"; do
			[ "$b" != "${bins[0]}" ] || continue # the same binary twice: its rows cannot be paired
			printf '%s\n' "${rows[@]}" | awk -v a="${bins[0]}" -v b="$b" -v q="$q" '
				$2 == q && $1 == a { wa[++na] = $3 }
				$2 == q && $1 == b { wb[++nb] = $3 }
				END {
					n = na < nb ? na : nb
					for (i = 1; i <= n; i++) { r[i] = wa[i] > 0 ? wb[i] / wa[i] : 1; if (r[i] < 1) faster++ }
					for (i = 2; i <= n; i++) for (j = i; j > 1 && r[j-1] > r[j]; j--) { t = r[j]; r[j] = r[j-1]; r[j-1] = t }
					med = n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
					printf "%-28s %10s  median %.3f, %.3f-%.3f, faster in %d of %d pairs\n", b, q, med, r[1], r[n], faster, n
				}'
		done
	done
fi
