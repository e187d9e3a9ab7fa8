# Sourced by the bench scripts: one way to start a bimodal-server and to stop it.
#
#   start_server BINARY ADDRESS LOG [SERVER FLAGS...]
#       starts BINARY listening on ADDRESS (host:port), its output in LOG, and returns once it
#       answers /healthz; fails when it exits first or is not up within 120 s. Sets server_pid.
#   stop_server
#       stops it (and the ClickHouse it manages) and waits for it; nothing when none runs.
#   free_port
#       prints a loopback port free now.
#
# A script that starts one should `trap stop_server EXIT`, so that a failed run leaves no server
# behind.

server_pid=

start_server() {
	local binary=$1 address=$2 log=$3
	shift 3
	"$binary" --listen "$address" "$@" >"$log" 2>&1 &
	server_pid=$!
	local tries
	for ((tries = 0; tries < 600; tries++)); do
		# Answered by this server, not by one already on the port that it failed to bind.
		if curl -sf --max-time 2 -o /dev/null "http://$address/healthz" && kill -0 "$server_pid" 2>/dev/null; then
			return 0
		fi
		if ! kill -0 "$server_pid" 2>/dev/null; then
			server_pid=
			echo "the server exited before answering: $log" >&2
			return 1
		fi
		sleep 0.2
	done
	echo "the server did not answer within 120 s: $log" >&2
	stop_server
	return 1
}

stop_server() {
	[ -n "$server_pid" ] || return 0
	kill "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
	server_pid=
}

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
