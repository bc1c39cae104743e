#!/usr/bin/env bash
# An endpoint fed from a NATS JetStream stream, and an idempotent transfer that loads a JSONL file into it.
#
#   examples/jetstream/run.sh start         build if needed, create the stream, start an app-server and an api-server
#   examples/jetstream/run.sh load [file]   load a JSONL file into the stream (idempotent: same file → no-op)
#   examples/jetstream/run.sh status        processes and what the endpoint serves
#   examples/jetstream/run.sh stop          stop both servers (SIGTERM)
#
# Environment (honoured by both apps too): SLUICE_NATS_URL (default nats://127.0.0.1:4222), SLUICE_PORT (app-server,
# default 7270), SLUICE_API_PORT (api-server, default 8270), SLUICE_DATA_DIR (caches, store, logs, pids; default
# examples/jetstream/.sluice).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"
state=$(cd "$here" && mkdir -p "${SLUICE_DATA_DIR:-.sluice}" && cd "${SLUICE_DATA_DIR:-.sluice}" && pwd)
export SLUICE_NATS_URL=${SLUICE_NATS_URL:-nats://127.0.0.1:4222}
export SLUICE_PORT=${SLUICE_PORT:-7270}
export SLUICE_API_PORT=${SLUICE_API_PORT:-8270}
export SLUICE_DATA_DIR=$state
export SLUICE_STORE_URL=${SLUICE_STORE_URL:-sqlite:$state/store.db}
app=http://127.0.0.1:$SLUICE_PORT
api=http://127.0.0.1:$SLUICE_API_PORT

launch() { # name, binary
  echo "{\"msg\":\"--- run.sh: starting $1 ---\",\"time\":$(date +%s%3N)}" >>"$state/logs/$1.log"
  (
    cd "$here"
    nohup node "$repo/$2" --config sluice.yaml >>"$state/logs/$1.log" 2>&1 &
    echo $! >"$state/pids/$1.pid"
  )
}

wait_for() { # what, url, seconds
  local deadline=$((SECONDS + $3))
  until [[ $(http_code "$2") == 200 ]]; do
    exit_if_one_exited stop app-server api-server
    ((SECONDS < deadline)) || die "timed out after $3 s waiting for $1 (logs: $state/logs/)"
    sleep 0.3
  done
}

start() {
  command -v curl >/dev/null || die "curl is needed"
  for name in app-server api-server; do
    alive "$name" && die "already running ($name, pid $(pid_of "$name")); \`run.sh stop\` first"
  done
  port_free "$SLUICE_PORT" || die "port $SLUICE_PORT is in use; choose another with SLUICE_PORT=<port>"
  port_free "$SLUICE_API_PORT" || die "port $SLUICE_API_PORT is in use; choose another with SLUICE_API_PORT=<port>"
  mkdir -p "$state/logs" "$state/pids"
  build_apps
  # The stream first: the endpoint pipeline reads it from its first start.
  node "$here/stream.mjs" || die "cannot create the stream on $SLUICE_NATS_URL (is nats-server -js running?)"
  launch app-server apps/app-server/dist/bin.js
  wait_for "the app-server" "$app/readyz" 60
  launch api-server apps/api-server/dist/bin.js
  wait_for "the api-server" "$api/readyz" 60
  cat <<EOF
▸ app-server on $app, api-server on $api (logs: $state/logs/)

Load the cities into the stream (run it twice: the second time publishes nothing):
examples/jetstream/run.sh load

Then query the endpoint the stream feeds:
curl -s $api/v1/endpoints/cities/count -H 'content-type: application/json' -d '{"\$filter":{"country":"IS"}}'
curl -s $api/v1/endpoints/cities/query -H 'content-type: application/json' -d '{"\$filter":{"country":"IS"},"\$order_by":{"name":"asc"},"\$limit":3}'
EOF
}

load() {
  alive app-server || die "the app-server is not running; \`examples/jetstream/run.sh start\` first"
  node "$here/load.mjs" "$@"
}

stop() {
  stopped=0
  # One after the other, the api-server first (it only reads), then the app-server (it hands its transfers back).
  stop_group api-server
  stop_group app-server
  ((stopped)) || echo "▸ nothing was running"
}

status() {
  local down=0
  for name in app-server api-server; do
    if alive "$name"; then
      echo "$name: pid $(pid_of "$name")"
    else
      echo "$name: not running"
      down=1
    fi
  done
  ((down)) && return 3
  curl -s --max-time 5 "$api/v1/endpoints" | node -e '
    let text = ""; process.stdin.on("data", (d) => (text += d)).on("end", () => {
      const { endpoints } = JSON.parse(text);
      if (endpoints.length === 0) console.log("endpoint cities: not serving yet");
      for (const e of endpoints) console.log(`endpoint ${e.name}: ${e.recordCount} records from ${e.cache}`);
    });'
}

case ${1:-} in
  start) start ;;
  load)
    shift
    load "$@"
    ;;
  status) status ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|load [file]|status|stop" >&2
    exit 2
    ;;
esac
