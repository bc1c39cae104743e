#!/usr/bin/env bash
# A three-node Sluice cluster on one machine: three app-servers (node1..node3, each with its own LMDB data
# directory, as if on three hosts) sharing one PostgreSQL database and NATS, plus two api-servers (api1 serves
# node1's caches, api2 node2's).
#
#   examples/cluster/run.sh start    build if needed, create the database, start the five processes, wait until ready
#   examples/cluster/run.sh status   processes, readiness, cluster members, endpoints, transfers
#   examples/cluster/run.sh stop     stop the five processes gracefully (SIGTERM)
#   examples/cluster/run.sh reset    stop, drop the database, delete the state directory (data, logs, out/)
#
# Environment: SLUICE_CLUSTER_PG (server URL, default postgres://postgres@127.0.0.1:5432), SLUICE_CLUSTER_DB
# (database, default sluice_cluster_example), SLUICE_NATS_URL (default nats://127.0.0.1:4222),
# SLUICE_CLUSTER_BASE_PORT (default 7100: app-servers on 7101-7103, api-servers on 7181-7182),
# SLUICE_CLUSTER_STATE (data directories, logs, pids and the transfers' out/; default examples/cluster/.cluster).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"
state=$(mkdir -p "${SLUICE_CLUSTER_STATE:-$here/.cluster}" && cd "${SLUICE_CLUSTER_STATE:-$here/.cluster}" && pwd)
pg=${SLUICE_CLUSTER_PG:-postgres://postgres@127.0.0.1:5432}
db=${SLUICE_CLUSTER_DB:-sluice_cluster_example}
nats=${SLUICE_NATS_URL:-nats://127.0.0.1:4222}
base=${SLUICE_CLUSTER_BASE_PORT:-7100}
endpoint=nordic-cities
out=$state/out
# How the printed transfer requests name the output directory: relative to this directory (the nodes' working
# directory) when it is inside it, else absolute.
if [[ $out == "$here/"* ]]; then out_path=${out#"$here/"}; else out_path=$out; fi

nodes=(node1 node2 node3)
apis=(api1 api2)

port_of() {
  case $1 in
    node1) echo $((base + 1)) ;;
    node2) echo $((base + 2)) ;;
    node3) echo $((base + 3)) ;;
    api1) echo $((base + 81)) ;;
    api2) echo $((base + 82)) ;;
  esac
}
host_of() { # the app-server whose caches an api-server reads
  case $1 in
    api1) echo node1 ;;
    api2) echo node2 ;;
    *) echo "$1" ;;
  esac
}
url_of() { echo "http://127.0.0.1:$(port_of "$1")"; }
create_database() {
  local exists
  exists=$(psql "$pg/postgres" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'") ||
    die "PostgreSQL is not reachable at $pg (set SLUICE_CLUSTER_PG)"
  if [[ $exists != 1 ]]; then
    psql -q "$pg/postgres" -c "CREATE DATABASE \"$db\"" || die "could not create database $db"
    echo "▸ created database $db"
  else
    echo "▸ database $db exists (its transfers are kept; \`run.sh reset\` drops it)"
  fi
}

launch() { # name, binary, extra env...
  local name=$1 bin=$2
  shift 2
  echo "{\"msg\":\"--- run.sh: starting $name ---\",\"time\":$(date +%s%3N)}" >>"$state/logs/$name.log"
  (
    cd "$here"
    env "$@" SLUICE_STORE_URL="$pg/$db" SLUICE_NATS_URL="$nats" SLUICE_FILE_ROOTS="$repo/examples/quickstart/data:$out" \
      nohup node "$repo/$bin" --config sluice.yaml >>"$state/logs/$name.log" 2>&1 &
    echo $! >"$state/pids/$name.pid"
  )
}

wait_until() { # what, seconds, command...
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    if ((SECONDS >= deadline)); then
      die "timed out after ${seconds}s waiting for $what (logs: $state/logs/)"
    fi
    exit_if_one_exited stop_all "${nodes[@]}" "${apis[@]}"
    sleep 0.5
  done
}

ready() { [[ $(http_code "$(url_of "$1")/readyz") == 200 ]]; }
serving() { [[ $(http_code "$(url_of "$1")/v1/endpoints/$endpoint") == 200 ]]; }

start() {
  need node "Node.js 20"
  need psql "the PostgreSQL client"
  need curl "to probe the servers"
  for name in "${nodes[@]}" "${apis[@]}"; do
    alive "$name" && die "the cluster is already running ($name, pid $(pid_of "$name")); \`run.sh stop\` first"
  done
  for name in "${nodes[@]}" "${apis[@]}"; do
    port_free "$(port_of "$name")" ||
      die "port $(port_of "$name") ($name) is in use; choose other ports with SLUICE_CLUSTER_BASE_PORT=<port>"
  done
  nats_reachable "$nats" || die "NATS is not reachable at $nats (start nats-server -js, or set SLUICE_NATS_URL)"
  create_database

  mkdir -p "$state/logs" "$state/pids" "$out"
  build_apps

  for name in "${nodes[@]}"; do
    launch "$name" apps/app-server/dist/bin.js SLUICE_NODE_ID="$name" SLUICE_PORT="$(port_of "$name")" \
      SLUICE_DATA_DIR="$state/$name"
  done
  for name in "${nodes[@]}"; do
    wait_until "$name to be ready" 60 ready "$name"
    echo "▸ $name ready on $(url_of "$name") (data: $state/$name)"
  done
  for name in "${apis[@]}"; do
    launch "$name" apps/api-server/dist/bin.js SLUICE_API_PORT="$(port_of "$name")" \
      SLUICE_NODE_ID="$(host_of "$name")" SLUICE_DATA_DIR="$state/$(host_of "$name")"
  done
  for name in "${apis[@]}"; do
    wait_until "$name to serve $endpoint" 120 serving "$name"
    echo "▸ $name serving $endpoint on $(url_of "$name") (reads $(host_of "$name")'s caches)"
  done
  cat <<EOF

The cluster is running (store: $pg/$db, NATS: $nats). Logs: $state/logs/

Submit a transfer on node1, resend it to node2 (same id, same body: it is not run twice), read it on node3:
curl -s $(url_of node1)/v1/transfers -H 'content-type: application/json' -d '{"id":"cities-export-1","mode":"idempotent","source":{"type":"file","path":"../quickstart/data/cities.jsonl","format":"jsonl"},"destination":{"type":"file","path":"$out_path/cities-export-1.jsonl","format":"jsonl"}}'
curl -s $(url_of node2)/v1/transfers -H 'content-type: application/json' -d '{"id":"cities-export-1","mode":"idempotent","source":{"type":"file","path":"../quickstart/data/cities.jsonl","format":"jsonl"},"destination":{"type":"file","path":"$out_path/cities-export-1.jsonl","format":"jsonl"}}'
curl -s $(url_of node3)/v1/transfers/cities-export-1

Query the endpoint on either api-server:
curl -s $(url_of api1)/v1/endpoints/$endpoint/query -H 'content-type: application/json' -d '{"\$filter":{"country":"IS"},"\$order_by":{"name":"asc"},"\$limit":5}'
curl -s $(url_of api2)/v1/endpoints/$endpoint/count -H 'content-type: application/json' -d '{"\$filter":{"country":"NO"}}'

examples/cluster/run.sh status    # what runs
examples/cluster/run.sh stop      # stop it
EOF
}

stop_all() {
  stopped=0
  # api-servers first (they only read), then the app-servers (they hand their transfers back).
  stop_group "${apis[@]}"
  stop_group "${nodes[@]}"
  ((stopped)) || echo "▸ nothing was running"
}

status() {
  local running=0 total=0 unhealthy=0
  for name in "${nodes[@]}" "${apis[@]}"; do
    total=$((total + 1))
    if alive "$name"; then
      running=$((running + 1))
      local readiness
      readiness=$(http_code "$(url_of "$name")/readyz")
      [[ $readiness == 200 ]] || unhealthy=$((unhealthy + 1))
      printf '%-6s pid %-8s %-24s %s\n' "$name" "$(pid_of "$name")" "$(url_of "$name")" \
        "$([[ $readiness == 200 ]] && echo ready || echo "NOT READY (readyz $readiness)")"
    else
      printf '%-6s %-12s %-24s %s\n' "$name" "" "$(url_of "$name")" "not running"
    fi
  done
  if ((running == 0)); then
    echo "The cluster is not running (\`run.sh start\`)."
    return 3
  fi
  local first
  for name in "${nodes[@]}"; do
    if alive "$name"; then
      first=$name
      break
    fi
  done
  if [[ -n ${first:-} ]]; then
    echo
    curl -s --max-time 5 "$(url_of "$first")/v1/nodes" | node -e '
      let text = ""; process.stdin.on("data", (d) => (text += d)).on("end", () => {
        const { nodes } = JSON.parse(text);
        console.log("cluster members (from the store):");
        for (const n of nodes) console.log(`  ${n.nodeId.padEnd(6)} ${n.address.padEnd(24)} ${n.alive ? "alive" : "gone"}, last seen ${n.lastSeenAt}`);
      });' || true
    curl -s --max-time 5 "$(url_of "$first")/v1/transfers?limit=500" | node -e '
      let text = ""; process.stdin.on("data", (d) => (text += d)).on("end", () => {
        const body = JSON.parse(text);
        const items = body.records ?? [];
        const byState = {};
        for (const t of items) byState[t.state] = (byState[t.state] ?? 0) + 1;
        const summary = Object.entries(byState).map(([s, n]) => `${n} ${s}`).join(", ");
        console.log(`transfers: ${items.length === 0 ? "none" : summary}`);
        for (const t of items.slice(0, 10)) console.log(`  ${t.id}: ${t.state}${t.owner ? ` on ${t.owner.nodeId}` : ""}${t.result ? `, ${t.result.recordsWritten} records written` : ""}`);
      });' || true
  fi
  echo "endpoints:"
  for name in "${apis[@]}"; do
    alive "$name" || continue
    curl -s --max-time 5 "$(url_of "$name")/v1/endpoints" | node -e '
      let text = ""; process.stdin.on("data", (d) => (text += d)).on("end", () => {
        for (const e of JSON.parse(text).endpoints)
          console.log(`  ${process.argv[1]}: ${e.name} ${e.recordCount} records from ${e.cache}`);
      });' "$name" || true
  done
  if ((running < total || unhealthy > 0)); then return 1; fi
  return 0
}

reset() {
  stop_all
  psql -q "$pg/postgres" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" && echo "▸ dropped database $db"
  rm -rf "$state"
  echo "▸ removed $state"
}

case ${1:-} in
  start) start ;;
  stop) stop_all ;;
  status) status ;;
  reset) reset ;;
  *)
    echo "usage: $0 start|stop|status|reset" >&2
    exit 2
    ;;
esac
