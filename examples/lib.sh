# Helpers shared by the example scripts (sourced, not run). The caller sets `repo` (the repository root) and
# `state` (its state directory, with pids/ and logs/).

die() {
  echo "✖ $*" >&2
  exit 1
}

need() { # command, what it is for
  command -v "$1" >/dev/null 2>&1 || die "$1 is needed ($2)"
}

pid_of() { cat "$state/pids/$1.pid" 2>/dev/null || true; }

alive() {
  local pid
  pid=$(pid_of "$1")
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

http_code() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$1" || true; }

port_free() {
  node -e '
    const server = require("node:net").createServer();
    server.once("error", () => process.exit(1));
    server.listen(Number(process.argv[1]), "127.0.0.1", () => server.close(() => process.exit(0)));
  ' "$1"
}

nats_reachable() {
  node -e '
    const url = new URL(process.argv[1].split(",")[0]);
    const socket = require("node:net").connect(Number(url.port || 4222), url.hostname);
    socket.setTimeout(3000, () => process.exit(1));
    socket.once("error", () => process.exit(1));
    socket.once("data", (d) => process.exit(String(d).startsWith("INFO") ? 0 : 1));
  ' "$1"
}

# Builds both apps (turbo caches it) unless SLUICE_SKIP_BUILD=1, and prepares the example data.
build_apps() {
  if [[ ${SLUICE_SKIP_BUILD:-} == 1 ]]; then
    echo "▸ SLUICE_SKIP_BUILD=1: using the apps as built"
  else
    echo "▸ building the app-server and the api-server (turbo; cached after the first run)"
    (cd "$repo" && TURBO_TELEMETRY_DISABLED=1 "$repo/node_modules/.bin/turbo" run build \
      --filter=@sluice/app-server --filter=@sluice/api-server --output-logs=errors-only >"$state/logs/build.log" 2>&1) ||
      {
        cat "$state/logs/build.log" >&2
        die "the build failed"
      }
  fi
  node "$repo/scripts/prepare-quickstart-data.mjs" >/dev/null
}

# Stops a group of processes together (SIGTERM, then waits; SIGKILL after 30 s). Prints what it stopped and sets
# `stopped=1` when one of them was running.
stop_group() {
  local name
  for name in "$@"; do
    alive "$name" && kill -TERM "$(pid_of "$name")" 2>/dev/null && stopped=1
  done
  for name in "$@"; do
    local pid waited=0
    pid=$(pid_of "$name")
    [[ -z $pid ]] && continue
    while kill -0 "$pid" 2>/dev/null; do
      if ((waited >= 300)); then
        echo "! $name (pid $pid) did not stop within 30 s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.1
      waited=$((waited + 1))
    done
    rm -f "$state/pids/$name.pid"
    echo "▸ stopped $name"
  done
}

# While waiting for a start: when one of the named processes was started and has exited, prints the end of its
# log, runs `stop_command` (to stop the others) and exits 1.
exit_if_one_exited() { # stop_command, names...
  local stop_command=$1 proc
  shift
  for proc in "$@"; do
    if [[ -f $state/pids/$proc.pid ]] && ! alive "$proc"; then
      echo "✖ $proc exited; last lines of $state/logs/$proc.log:" >&2
      tail -n 20 "$state/logs/$proc.log" >&2
      "$stop_command" >&2
      exit 1
    fi
  done
}
