# lib.sh - shell helpers shared by tools/bench-all.sh and tools/bench-vs-peers.sh:
# a temporary directory, daemons started in the background and always stopped
# (TERM, then KILL after 3 s) on exit, readiness waits, bounded runs, and reading
# key=value figures. Source it from the repo root after `set -euo pipefail`.

BUILD=${BUILD:-build}
BIN=$BUILD/bin
BL_TMP=
BL_PIDS=()
BL_FAILED=0
BL_MASTER_URL=

bl_log() { printf '%s\n' "$*" >&2; }

# bl_init NAME - create the temporary directory and the exit trap.
bl_init() {
	BL_TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
	trap bl_on_exit EXIT
	trap 'exit 130' INT TERM HUP
}

bl_stop_pid() {
	local pid=$1
	kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 30); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		bl_log "bench: pid $pid did not stop within 3 s of SIGTERM; killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

# bl_stop_all - stop every daemon this script started, newest first.
bl_stop_all() {
	local i
	for ((i = ${#BL_PIDS[@]} - 1; i >= 0; i--)); do
		bl_stop_pid "${BL_PIDS[$i]}"
	done
	BL_PIDS=()
}

bl_on_exit() {
	local rc=$?
	trap - EXIT
	set +e
	bl_stop_all
	[ -n "$BL_TMP" ] && rm -rf "$BL_TMP"
	exit "$rc"
}

# Placement: daemons started by bl_spawn run on the CPUs BL_SERVER_CPUS,
# commands run by bl_run on BL_CLIENT_CPUS (taskset lists); empty,
# wherever the scheduler puts them. BL_CMD: bl_placed's result.
BL_SERVER_CPUS=
BL_CLIENT_CPUS=
BL_CMD=()

# bl_placed CPUS CMD... - sets BL_CMD to CMD, confined to CPUS by taskset
# when CPUS is not empty.
bl_placed() {
	local cpus=$1
	shift
	BL_CMD=("$@")
	[ -z "$cpus" ] || BL_CMD=(taskset -c "$cpus" "$@")
}

# bl_spawn LOG CMD... - start CMD in the background (on BL_SERVER_CPUS),
# output to LOG; records the command line (bl_record); sets BL_PID.
bl_spawn() {
	local log=$1
	shift
	bl_placed "$BL_SERVER_CPUS" "$@"
	bl_record "${BL_CMD[@]}"
	"${BL_CMD[@]}" >"$log" 2>&1 </dev/null &
	BL_PID=$!
	BL_PIDS+=("$BL_PID")
}

# bl_start_proxy NAME SOCKET ARGS... - a lunar-proxy serving SOCKET, waited
# until lunarctl status answers (10 s). Sets BL_PID.
bl_start_proxy() {
	local name=$1 sock=$2 extra
	shift 2
	mapfile -t extra < <(bl_port_flags "$BIN/lunar-proxy")
	bl_spawn "$BL_TMP/$name.log" "$BIN/lunar-proxy" --socket "$sock" --data-port 0 \
		"${extra[@]}" "$@"
	for _ in $(seq 300); do
		# Ready, and its segment resident (no first-touch faults in a run).
		if "$BIN/lunarctl" --socket "$sock" status >/dev/null 2>&1 &&
			{ grep -q "segment resident\|segment-size 0" "$BL_TMP/$name.log" ||
				[[ " $* " == *" --segment-size 0 "* ]]; }; then
			return 0
		fi
		if ! kill -0 "$BL_PID" 2>/dev/null; then
			bl_log "bench: $name exited during start-up:"
			tail -n 20 "$BL_TMP/$name.log" >&2
			return 1
		fi
		sleep 0.1
	done
	bl_log "bench: $name was not ready within 30 s"
	tail -n 20 "$BL_TMP/$name.log" >&2
	return 1
}

# bl_start_master NAME ARGS... - a lunar-master on a free loopback port; sets
# BL_PID and BL_MASTER_URL once its log says where it listens (10 s).
bl_start_master() {
	local name=$1 port extra
	shift
	mapfile -t extra < <(bl_port_flags "$BIN/lunar-master")
	BL_MASTER_URL=
	bl_spawn "$BL_TMP/$name.log" "$BIN/lunar-master" --listen 127.0.0.1 --port 0 \
		"${extra[@]}" "$@"
	BL_CMDS[-1]+="   # its URL: \$MASTER, its pid: \$MASTER_PID"
	for _ in $(seq 100); do
		# The log appears once the background shell has opened it.
		port=$(sed -n 's/.*listening on tcp:\/\/[^:]*:\([0-9][0-9]*\).*/\1/p' \
			"$BL_TMP/$name.log" 2>/dev/null | head -n 1 || true)
		if [ -n "$port" ]; then
			BL_MASTER_URL=tcp://127.0.0.1:$port
			return 0
		fi
		if ! kill -0 "$BL_PID" 2>/dev/null; then
			bl_log "bench: $name exited during start-up:"
			tail -n 20 "$BL_TMP/$name.log" >&2
			return 1
		fi
		sleep 0.1
	done
	bl_log "bench: $name did not report its port within 10 s"
	return 1
}

# bl_record CMD... - remember a command line for bl_cmds_flush, temporary
# paths shown as $TMP, the master's URL as $MASTER and its pid as $MASTER_PID.
bl_record() {
	BL_CMDS+=("$(printf '%q ' "$@" | sed -e "s|$BL_TMP|\$TMP|g" \
		-e "s|${BL_MASTER_URL:-//none//}|\$MASTER|g" \
		-e 's|--master-pid [0-9]*|--master-pid $MASTER_PID|' -e 's/ $//')")
}

# bl_port_flags BINARY - "--http-port 0" when BINARY has that flag, so several
# daemons on one host never fight over a fixed default port.
bl_port_flags() {
	local help
	# Read the whole text first: grep -q would stop reading early, and under
	# pipefail the writer's SIGPIPE made the test fail now and then.
	help=$("$1" --help 2>&1 || true)
	if grep -q -- '--http-port' <<<"$help"; then
		printf '%s\n' --http-port 0
	fi
}

# bl_run OUT SECS CMD... - run CMD (on BL_CLIENT_CPUS) bounded by SECS,
# stdout to OUT, stderr to OUT.err; records the command line (temporary
# paths shown as $TMP) in BL_CMDS. Returns CMD's status; a failure is also
# counted in BL_FAILED.
BL_CMDS=()
bl_run() {
	local out=$1 secs=$2 rc=0
	shift 2
	bl_placed "$BL_CLIENT_CPUS" "$@"
	bl_record "${BL_CMD[@]}"
	timeout --kill-after=5 "$secs" "${BL_CMD[@]}" >"$out" 2>"$out.err" || rc=$?
	if [ "$rc" -ne 0 ]; then
		BL_FAILED=$((BL_FAILED + 1))
		bl_log "bench: FAILED (exit $rc): $*"
		tail -n 5 "$out.err" >&2 || true
	fi
	return "$rc"
}

# bl_cmds_flush - print the recorded commands as a markdown code block (each
# once, in the order first recorded), then forget them.
bl_cmds_flush() {
	[ "${#BL_CMDS[@]}" -gt 0 ] || return 0
	echo
	echo '```sh'
	printf '%s\n' "${BL_CMDS[@]}" | awk '!seen[$0]++'
	echo '```'
	BL_CMDS=()
}

# bl_kv FILE KEY - the value of KEY=... in FILE, or "-" when absent.
bl_kv() {
	local v
	v=$(sed -n "s/^$2=//p" "$1" 2>/dev/null | tail -n 1 || true)
	printf '%s' "${v:--}"
}

# bl_fmt NUMBER DIGITS - a number rounded, or "-".
bl_fmt() {
	case $1 in
	'' | -) printf '-' ;;
	*) LC_ALL=C printf "%.${2}f" "$1" 2>/dev/null || printf '%s' "$1" ;;
	esac
}

# bl_div A B DIGITS - A / B, or "-".
bl_div() {
	case "$1$2" in
	*-*) printf '-' ;;
	*) LC_ALL=C awk -v a="$1" -v b="$2" -v d="$3" \
		'BEGIN { if (b == 0) print "-"; else printf "%." d "f", a / b }' ;;
	esac
}

# bl_machine - a markdown list describing this machine and build.
bl_machine() {
	local model
	model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
	echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- CPU: ${model:-unknown}, $(nproc) online CPUs"
	echo "- Memory: $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
	echo "- Kernel: $(uname -srm)"
	echo "- Commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
	echo "- Build: \`$BUILD\` ($(cc --version | head -n 1))"
}

# bl_need BIN... - fail unless every named binary of $BIN exists.
bl_need() {
	local b
	for b in "$@"; do
		if [ ! -x "$BIN/$b" ]; then
			bl_log "bench: $BIN/$b is missing; build it first:"
			bl_log "  make BUILD=$BUILD $BIN/$b"
			exit 1
		fi
	done
}
