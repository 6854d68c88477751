#!/usr/bin/env bash
# load/ci.sh runs both load scenarios of `openxet load` in short form against
# a real `openxet serve` on a free loopback port with a temporary data
# directory, and exits non-zero when either finds a correctness failure (an
# honest request refused or answered wrongly, a wrong byte, a limit that let
# too much through, server RSS over its budget plus the documented overhead).
# Timings never fail it: no check depends on how much load the machine
# manages to send (a limit the abuser never passed is a note in the report),
# and the only deadlines are hang guards (a request unanswered after 2
# minutes, an operation still running 5 minutes after the last phase). The
# server is always stopped (SIGTERM) and the temporary directory removed.
#
# Settings (environment): LOAD_DURATION (per phase, default 20s),
# LOAD_TENANTS (default 50), LOAD_MEMORY_BUDGET (default 300MiB: small enough
# that the abuser's 320 held reads, 256KiB of budget each, overflow its
# credential's 25% share, so the share's refusals are exercised),
# LOAD_REPORT_DIR (keep the JSON and HTML reports there), LOAD_EXTRA (more
# flags for both runs), OPENXET_BIN (use this binary instead of building one),
# LOAD_NODES (default 1: how many `openxet serve` processes to start on the
# one data directory and load together, as docs/scale-out.md describes).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
duration=${LOAD_DURATION:-20s}
tenants=${LOAD_TENANTS:-50}
budget=${LOAD_MEMORY_BUDGET:-300MiB}
nodes=${LOAD_NODES:-1}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/openxet-load.XXXXXX")
server_pids=()

stop_one() {
	local pid=$1
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "load/ci.sh: server $pid did not stop within 10s of SIGTERM; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
	fi
}
stop_server() {
	local pid
	for pid in "${server_pids[@]}"; do
		stop_one "$pid"
	done
	server_pids=()
}
cleanup() {
	stop_server
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# port_free reports whether nothing listens on 127.0.0.1:$1.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_node starts `openxet serve` number $1 on the data directory, on a
# free port, and waits until it listens (the first also until it printed the
# admin token); it appends to server_pids and OPENXET_SERVER and sets
# OPENXET_TOKEN. It retries if another process takes the port first.
start_node() {
	local i=$1 attempt port token pid
	for attempt in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 30000))
		port_free "$port" || continue
		"$TMP/openxet" serve --listen "127.0.0.1:$port" --data-dir "$TMP/data" \
			--memory-budget "$budget" --log-level warn \
			>"$TMP/server$i.out" 2>"$TMP/server$i.err" &
		pid=$!
		server_pids+=("$pid")
		for _ in $(seq 1 300); do
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			if [[ "$i" == 1 ]]; then
				token=$(sed -n 's/^Token (shown once, store it now): //p' "$TMP/server1.out")
				[[ -n "$token" ]] || { sleep 0.1; continue; }
				export OPENXET_TOKEN="$token"
			fi
			if ! port_free "$port"; then
				OPENXET_SERVER="${OPENXET_SERVER:+$OPENXET_SERVER,}http://127.0.0.1:$port"
				export OPENXET_SERVER
				return 0
			fi
			sleep 0.1
		done
		echo "load/ci.sh: server $i did not start (attempt $attempt):" >&2
		tail -n 20 "$TMP/server$i.err" >&2 || true
		stop_one "$pid"
		unset 'server_pids[-1]'
	done
	return 1
}

# start_server starts $nodes servers on a fresh data directory and sets
# server_pids, OPENXET_SERVER (their base URLs, comma-separated) and
# OPENXET_TOKEN.
start_server() {
	local i
	rm -rf "$TMP/data"
	unset OPENXET_SERVER
	for i in $(seq 1 "$nodes"); do
		start_node "$i" || return 1
	done
}

if [[ -n "${OPENXET_BIN:-}" ]]; then
	cp "$OPENXET_BIN" "$TMP/openxet"
else
	echo "load/ci.sh: building"
	(cd "$root" && go build -o "$TMP/openxet" .)
fi
if ! "$TMP/openxet" load --help >/dev/null 2>&1; then
	echo "load/ci.sh: this openxet has no load command (register loadCommand(env) in cli/app.go)" >&2
	exit 1
fi

status=0
for scenario in many_tenants abuse; do
	start_server
	echo "load/ci.sh: $scenario against $OPENXET_SERVER (memory budget $budget per node, $tenants tenants, $duration per phase)"
	out="$TMP/$scenario.json"
	# shellcheck disable=SC2086 # LOAD_EXTRA is a list of flags
	if "$TMP/openxet" load --scenario "$scenario" --duration "$duration" --tenants "$tenants" \
		--drain-timeout 5m --json --report "$TMP/$scenario.html" ${LOAD_EXTRA:-} >"$out" 2>"$TMP/$scenario.log"; then
		echo "load/ci.sh: $scenario OK"
	else
		rc=$?
		status=1
		echo "load/ci.sh: $scenario FAILED (exit $rc)" >&2
		cat "$TMP/$scenario.log" >&2
		# The failures and their first messages, from the JSON report.
		sed -n '/"failures"/,/"ok"/p' "$out" >&2 || true
		for err in "$TMP"/server*.err; do
			echo "load/ci.sh: last lines of $(basename "$err") (but the abuser's aborted fetches):" >&2
			grep -v 'msg="fetch aborted"' "$err" | tail -n 30 >&2 || true
		done
	fi
	if [[ -n "${LOAD_REPORT_DIR:-}" ]]; then
		mkdir -p "$LOAD_REPORT_DIR"
		cp "$out" "$TMP/$scenario.html" "$LOAD_REPORT_DIR/" 2>/dev/null || true
	fi
	stop_server
done
exit "$status"
