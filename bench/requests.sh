#!/usr/bin/env bash
# Kafka requests per order, as the pool's processes send them (issue 35).
#
# Runs `pool_worker supervise --instances 1-N` with librdkafka's protocol
# debug log (LIBRDKAFKA_DEBUG=protocol) on fresh topics of a running Apache
# Kafka, sends M orders of `true`, waits until every one is completed, stops
# the pool and counts the `Sent ...Request` lines written after the pool was
# idle, by request type, per order. Request counts, unlike CPU and wall
# times, do not depend on this machine's load (fetches do a little: how many
# records one fetch answer carries depends on the timing).
#
# Usage: KAFKA_BROKERS=HOST:PORT bench/requests.sh [--bin PATH] [--instances N]
#            [--orders M] [--one-at-a-time] [--job CMD] [--log FILE]
#
#   --bin            the pool_worker binary (default: target/release/pool_worker)
#   --instances N    instances 1..N (default 8)
#   --orders M       orders (default 80)
#   --one-at-a-time  each order sent once the previous one completed (an idle
#                    pool), not all at once (a burst)
#   --job CMD        each order's command (default: true)
#   --log FILE       keep the pool's log there (default: a temporary file)
#
# Compare two builds by running it with --bin for each, alternately. The
# broker: scripts/kafka.sh start --port auto (its tools are found through
# scripts/kafka.sh tool).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
bin=$root/target/release/pool_worker
n=8
m=80
one=false
job=true
log=
while [ $# -gt 0 ]; do
    case $1 in
        --bin) bin=$2; shift 2 ;;
        --instances) n=$2; shift 2 ;;
        --orders) m=$2; shift 2 ;;
        --one-at-a-time) one=true; shift ;;
        --job) job=$2; shift 2 ;;
        --log) log=$2; shift 2 ;;
        -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "requests.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
    esac
done
[ -n "${KAFKA_BROKERS:-}" ] || { echo "requests.sh: set KAFKA_BROKERS to a running Apache Kafka (scripts/kafka.sh start --port auto)" >&2; exit 2; }
[ -x "$bin" ] || { echo "requests.sh: no pool_worker binary at $bin (cargo build --release, or --bin)" >&2; exit 2; }
case $n$m in *[!0-9]*) echo "requests.sh: --instances and --orders take numbers" >&2; exit 2 ;; esac

work=$(mktemp -d)
[ -n "$log" ] || log=$work/pool.log
sup=
cleanup() {
    [ -n "$sup" ] && kill "$sup" 2>/dev/null && wait "$sup" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

tag=req$$_$RANDOM
export ORDERS_TOPIC=${tag}_orders COORDINATION_TOPIC=${tag}_claims ORDERS_PARTITIONS=1
PATH=$("$root/scripts/kafka.sh" fetch | sed -n 's/^tools=//p'):$PATH
export PATH
"$root/scripts/create-topics.sh" >/dev/null

completed() { grep -c 'event="completed"' "$log" || true; }
# Waits (at most 120 s) until `completed` reaches $1.
wait_for() {
    local i
    for i in $(seq 1 1200); do
        [ "$(completed)" -ge "$1" ] && return 0
        sleep 0.1
    done
    echo "requests.sh: only $(completed) of $1 orders completed in 120 s" >&2
    exit 1
}

LIBRDKAFKA_DEBUG=protocol RUST_LOG=librdkafka=debug,info STATE_DIR=$work/state \
    "$bin" supervise --instances "1-$n" >"$log" 2>&1 &
sup=$!
# Idle: every instance booted and its standby caught up.
for i in $(seq 1 300); do
    [ "$(grep -c 'standing by: connected' "$log" || true)" -ge "$n" ] && break
    sleep 0.1
done
sleep 1
start=$(wc -l <"$log")
if $one; then
    for i in $(seq 1 "$m"); do
        # shellcheck disable=SC2086 # an order line is split into words too
        "$bin" submit -- $job >/dev/null
        wait_for "$i"
        sleep 0.3
    done
else
    for i in $(seq 1 "$m"); do echo "$job"; done |
        kafka-console-producer.sh --bootstrap-server "$KAFKA_BROKERS" --topic "$ORDERS_TOPIC" 2>/dev/null
    wait_for "$m"
fi
sleep 1
kill "$sup"
wait "$sup" 2>/dev/null || true
sup=

mode=$($one && echo "one at a time" || echo "a burst")
echo "requests per order: $m orders of \`$job\`, $mode, $n instance(s), $(basename "$bin")"
tail -n +$((start + 1)) "$log" | grep -o 'Sent [A-Za-z]*Request' | sort | uniq -c |
    awk -v m="$m" '{ printf "%8.2f  %s\n", $1 / m, substr($3, 1, length($3) - 7); t += $1 }
                   END { printf "%8.2f  all\n", t / m }'
