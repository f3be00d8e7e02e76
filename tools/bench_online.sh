#!/usr/bin/env bash
# bench_online.sh: the whole-process figure of a large online run: `mosaic sim` of the
# online MoA example (the online policy, RATE queries a second, results written with -o), its
# wall time, CPU time and peak resident memory (GNU time's %M), for each query count and binary.
#
#   tools/bench_online.sh [BIN ...]           (default: bin/mosaic; make bench-online builds it)
#   QUERIES="100000 1000000 10000000" REPEAT=3 tools/bench_online.sh bin/mosaic /tmp/mosaic-old
#
# Environment: QUERIES, the query counts (default "100000 1000000"); REPEAT, the runs of each
# count and binary (default 1); RATE, the arrival rate in queries a second (default 0.5);
# TOML, the experiment file (default experiments/examples/online-moa.toml): a build older
# than the example's current keys needs the file of its own commit (git show
# b0fd06a:experiments/examples/online-moa.toml >FILE); WRITE=0 runs without -o (no results
# written; default 1). Relative paths, of BIN and TOML alike, are read from where the script
# is started.
#
# With several binaries the runs alternate (each count: binary 1, binary 2, ..., REPEAT
# times), so that the figures compared are measured in one sitting on the same machine; the
# last lines give each binary's medians per count (each column's own; the mean of the middle
# two for an even count), and each later binary's wall-time ratio to the first within each
# alternation (a pair measured seconds apart): their median, range and how many pairs were
# faster. The machine's speed drifts between hours by more than most changes gain, so the
# ratios of many short pairs (say QUERIES=300000 REPEAT=20) tell a change of a few percent
# where medians of long runs cannot. Results go to a temporary folder, removed.
set -euo pipefail
fail() {
	echo "bench_online.sh: $*" >&2
	exit 1
}
QUERIES=${QUERIES-"100000 1000000"}
REPEAT=${REPEAT-1}
RATE=${RATE-0.5}
WRITE=${WRITE-1}
[[ $QUERIES =~ ^[[:space:]]*[1-9][0-9]*([[:space:]]+[1-9][0-9]*)*[[:space:]]*$ ]] ||
	fail "QUERIES=\"$QUERIES\": want one or more positive query counts, such as \"100000 1000000\""
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || fail "REPEAT=\"$REPEAT\": want a positive whole number"
[[ $RATE =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] || fail "RATE=\"$RATE\": want a number of queries a second"
case $WRITE in 0 | 1) ;; *) fail "WRITE=\"$WRITE\": want 0 or 1" ;; esac
# Paths are taken from where the script is started, then the script works from the
# repository's root (for the default binary and experiment).
root=$(cd "$(dirname "$0")/.." && pwd)
abs() { case $1 in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$PWD" "$1" ;; esac; }
if [ -z "${TOML+set}" ]; then
	toml=$root/experiments/examples/online-moa.toml
else
	[ -f "$TOML" ] || fail "TOML=\"$TOML\": no such file"
	toml=$(abs "$TOML")
fi
names=("$@")
bins=()
for b in "${names[@]}"; do
	bins+=("$(abs "$b")")
done
if [ ${#names[@]} -eq 0 ]; then
	names=(bin/mosaic)
	bins=("$root/bin/mosaic")
fi
for i in "${!bins[@]}"; do
	[ -f "${bins[$i]}" ] && [ -x "${bins[$i]}" ] || fail "${names[$i]}: no such executable (make build builds bin/mosaic)"
done
[ -x /usr/bin/time ] || fail "needs GNU time (/usr/bin/time; apt-get install time)"
cd "$root"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $toml at $RATE queries/s, results written: $WRITE"
printf '%-28s %10s %4s %9s %9s %13s\n' binary queries run wall_s cpu_s peak_rss_MiB
rows=() # "binary-index queries wall cpu MiB": indices, so that a name with spaces cannot split
for q in $QUERIES; do
	for r in $(seq "$REPEAT"); do
		for i in "${!bins[@]}"; do
			rm -rf "$out/run"
			dest=()
			[ "$WRITE" = 0 ] || dest=(-o "$out/run")
			/usr/bin/time -f '%e %U %S %M' -o "$out/time" "${bins[$i]}" sim "$toml" \
				--set workload.queries="$q" --set workload.arrival_rate="$RATE" --policy online "${dest[@]}" \
				>/dev/null 2>"$out/log" || { cat "$out/log" >&2; exit 1; }
			read -r wall user sys rss <"$out/time"
			cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
			mib=$((rss / 1024))
			printf '%-28s %10s %4s %9s %9s %13s\n' "${names[$i]}" "$q" "$r" "$wall" "$cpu" "$mib"
			rows+=("$i $q $wall $cpu $mib")
		done
	done
done
# median FORMAT: the median of the numbers on standard input, one a line (the mean of the
# middle two for an even count), printed with FORMAT.
median() {
	sort -n | awk -v f="$1" '{ v[NR] = $1 } END { printf f, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo "medians:"
for q in $QUERIES; do
	for i in "${!bins[@]}"; do
		sel=$(printf '%s\n' "${rows[@]}" | awk -v i="$i" -v q="$q" '$1 == i && $2 == q')
		printf '%-28s %10s      %9s %9s %13s\n' "${names[$i]}" "$q" \
			"$(cut -d' ' -f3 <<<"$sel" | median %.2f)" "$(cut -d' ' -f4 <<<"$sel" | median %.2f)" \
			"$(cut -d' ' -f5 <<<"$sel" | median %.0f)"
	done
done
if [ ${#bins[@]} -gt 1 ]; then
	echo "ratios to ${names[0]} (wall time, pair by pair):"
	for q in $QUERIES; do
		for i in "${!bins[@]}"; do
			[ "$i" -gt 0 ] || continue
			[ "${bins[$i]}" != "${bins[0]}" ] || continue # the same binary twice: its rows cannot be paired
			printf '%s\n' "${rows[@]}" | awk -v b="$i" -v q="$q" -v name="${names[$i]}" '
				$2 == q && $1 == 0 { wa[++na] = $3 }
				$2 == q && $1 == b { wb[++nb] = $3 }
				END {
					n = na < nb ? na : nb
					for (i = 1; i <= n; i++) { r[i] = wa[i] > 0 ? wb[i] / wa[i] : 1; if (r[i] < 1) faster++ }
					for (i = 2; i <= n; i++) for (j = i; j > 1 && r[j-1] > r[j]; j--) { t = r[j]; r[j] = r[j-1]; r[j-1] = t }
					med = n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
					printf "%-28s %10s  median %.3f, %.3f-%.3f, faster in %d of %d pairs\n", name, q, med, r[1], r[n], faster, n
				}'
		done
	done
fi
