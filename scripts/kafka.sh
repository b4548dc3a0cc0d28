#!/usr/bin/env bash
# Apache Kafka on loopback, in KRaft mode, from Maven Central: the real broker
# that pool_worker's tests, CI and bench run against, and a way to try the
# pool on one.
#
# The broker is the version pinned in scripts/kafka/pom.xml (Apache Kafka
# 4.4.0): `mvn dependency:copy-dependencies` copies kafka_2.13, kafka-tools
# and their runtime jars, with log4j2 as SLF4J's binding, into a cache
# directory once; every later run reuses it offline. Needs Java 17+ and
# Maven (the first run only).
#
# Usage: scripts/kafka.sh start [--nodes N] [--port PORT|auto] [--dir DIR]
#                               [--sasl] [--user NAME=PASSWORD]... [--set KEY=VALUE]...
#                               [--watch PID] [--heap SIZE]
#        scripts/kafka.sh stop --dir DIR
#        scripts/kafka.sh run [start's options] [--pool N]
#        scripts/kafka.sh tool NAME [ARGS...]
#        scripts/kafka.sh fetch
#
#   start   formats KRaft storage (kafka.tools.StorageTool) and starts N nodes
#           (default 1; each is broker and controller) of kafka.Kafka in the
#           background on 127.0.0.1, PORT, PORT+1, ... (default 9092; `auto`
#           picks free ports). Waits until a topic can be created and a record
#           round-trips, then prints KEY=VALUE lines (bootstrap=, dir=,
#           tools=, node.I=PID PORT, and with --sasl sasl_bootstrap= and ca=)
#           and exits; the nodes keep running until `stop`.
#           --sasl adds a SASL_SSL listener per node (PORT+20, ...) with
#           SCRAM-SHA-512, a test CA made with openssl, and StandardAuthorizer
#           (ACLs enforced); --user adds a SCRAM user (admin=admin-secret is
#           always there and is a super user, as is the PLAINTEXT listener,
#           which stays the cluster's own). --set adds a broker setting to
#           every node. --watch stops the nodes once process PID is gone (the
#           tests pass their own pid). --heap is the JVM heap (default 512m).
#   stop    stops the nodes started in DIR (SIGTERM, then SIGKILL after 15 s)
#           and removes DIR if start made it.
#   run     start, in the foreground until Ctrl-C. With --pool N it also makes
#           the topics (scripts/create-topics.sh) and runs N pool instances
#           under `pool_worker supervise` against the broker.
#   tool    runs one of Kafka's command-line tools from the cache:
#           kafka-topics, kafka-acls, kafka-configs, kafka-console-producer,
#           kafka-console-consumer, kafka-metadata-quorum, kafka-features
#           (the same as TOOLS/NAME.sh, the wrappers start prints as tools=).
#   fetch   only fills the cache.
#
# Environment: POOL_WORKER_KAFKA_CACHE (default ~/.cache/pool_worker/kafka-VERSION),
# JAVA (default java), MVN (default mvn).
set -euo pipefail

prog=${0##*/}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
pom=$here/kafka/pom.xml
VERSION=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")
CACHE=${POOL_WORKER_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pool_worker/kafka-$VERSION}
LIB=$CACHE/lib
JAVA=${JAVA:-java}
MVN=${MVN:-mvn}

die() {
    printf '%s: %s\n' "$prog" "$*" >&2
    exit 1
}
say() { printf '%s: %s\n' "$prog" "$*" >&2; }
usage() { sed -n '/^# Usage:/,/^# Environment/p' "$0" | sed 's/^# \{0,1\}//'; }
now_ms() { date +%s%3N; }

# --- the cache -------------------------------------------------------------

# The tools `tool` knows, and their main classes.
declare -A TOOLS=(
    [kafka-topics]=org.apache.kafka.tools.TopicCommand
    [kafka-acls]=org.apache.kafka.tools.AclCommand
    [kafka-configs]=org.apache.kafka.tools.ConfigCommand
    [kafka-console-producer]=org.apache.kafka.tools.ConsoleProducer
    [kafka-console-consumer]=org.apache.kafka.tools.consumer.ConsoleConsumer
    [kafka-metadata-quorum]=org.apache.kafka.tools.MetadataQuorumCommand
    [kafka-features]=org.apache.kafka.tools.FeatureCommand
    [kafka-storage]=kafka.tools.StorageTool
)

fetch() {
    command -v "$JAVA" >/dev/null 2>&1 || die "java is not installed (Java 17 or newer is needed)"
    # The pom and the helper sources decide what the cache holds: a change to
    # either makes a new one.
    local stamp
    stamp=$(cat "$pom" "$here/kafka/Ready.java" | sha256sum | cut -c1-16)
    if [ -f "$CACHE/ready.$stamp" ]; then
        return 0
    fi
    command -v "$MVN" >/dev/null 2>&1 || die "maven (mvn) is needed once, to fetch Apache Kafka $VERSION into $CACHE"
    say "fetching Apache Kafka $VERSION from Maven Central into $CACHE (once)"
    mkdir -p "$CACHE"
    rm -rf "$LIB.tmp" "$CACHE/classes.tmp"
    "$MVN" -q -B -f "$pom" dependency:copy-dependencies \
        -DoutputDirectory="$LIB.tmp" -DincludeScope=runtime >&2 ||
        die "mvn could not fetch Apache Kafka $VERSION (see above)"
    mkdir -p "$CACHE/classes.tmp"
    javac -d "$CACHE/classes.tmp" -cp "$LIB.tmp/*" "$here/kafka/Ready.java" >&2 ||
        die "javac could not compile scripts/kafka/Ready.java"
    rm -rf "$LIB" "$CACHE/classes" "$CACHE/bin"
    mv "$LIB.tmp" "$LIB"
    mv "$CACHE/classes.tmp" "$CACHE/classes"
    mkdir -p "$CACHE/bin"
    local name
    for name in "${!TOOLS[@]}"; do
        cat >"$CACHE/bin/$name.sh" <<EOF
#!/bin/sh
# Apache Kafka $VERSION's $name, from $LIB (made by scripts/kafka.sh).
exec "\${JAVA:-java}" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$here/kafka/log4j2-tools.properties" -cp "$LIB/*" ${TOOLS[$name]} "\$@"
EOF
        chmod +x "$CACHE/bin/$name.sh"
    done
    rm -f "$CACHE"/ready.*
    touch "$CACHE/ready.$stamp"
}

# --- start -----------------------------------------------------------------

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Three ports per node, from BASE: clients (PLAINTEXT) BASE+i, the controller
# BASE+10+i, SASL_SSL BASE+20+i.
ports_free() {
    local base=$1 nodes=$2 i
    for ((i = 0; i < nodes; i++)); do
        port_free $((base + i)) && port_free $((base + 10 + i)) && port_free $((base + 20 + i)) || return 1
    done
}

pick_base() {
    local nodes=$1 try base low=32768
    # Below the kernel's ephemeral range, which every client's outgoing
    # connection draws from (a port found free there can be taken before
    # the broker binds it).
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
    [ "$low" -gt 11000 ] || low=32768
    for try in $(seq 1 50); do
        base=$((10000 + (RANDOM * 32768 + RANDOM) % (low - 10000 - 30)))
        if ports_free "$base" "$nodes"; then
            echo "$base"
            return 0
        fi
    done
    die "found no free ports on 127.0.0.1"
}

make_tls() {
    local tls=$1
    command -v openssl >/dev/null 2>&1 || die "openssl is needed for --sasl (the test CA)"
    mkdir -p "$tls"
    (
        cd "$tls"
        openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=pool_worker test CA" \
            -keyout ca.key -out ca.pem 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
            -keyout broker.key -out broker.csr 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
        openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
            -days 30 -extfile san.ext -out broker.crt 2>/dev/null
        # Kafka reads a PEM key store: the PKCS#8 key, then the chain.
        openssl pkcs8 -topk8 -nocrypt -in broker.key -out broker.p8
        cat broker.p8 broker.crt ca.pem >broker.pem
    ) || die "openssl could not make the test CA in $tls"
}

write_config() {
    local file=$1 id=$2 base=$3 nodes=$4 data=$5 sasl=$6 tls=$7
    local voters="" i
    for ((i = 0; i < nodes; i++)); do
        voters+="${voters:+,}$((i + 1))@127.0.0.1:$((base + 10 + i))"
    done
    local me=$((id - 1))
    local rf=$((nodes < 3 ? nodes : 3))
    local isr=$((rf < 2 ? 1 : 2))
    {
        echo "process.roles=broker,controller"
        echo "node.id=$id"
        echo "controller.quorum.voters=$voters"
        echo "controller.listener.names=CONTROLLER"
        echo "inter.broker.listener.name=PLAINTEXT"
        if [ "$sasl" = 1 ]; then
            echo "listeners=PLAINTEXT://127.0.0.1:$((base + me)),CONTROLLER://127.0.0.1:$((base + 10 + me)),SASL_SSL://127.0.0.1:$((base + 20 + me))"
            echo "advertised.listeners=PLAINTEXT://127.0.0.1:$((base + me)),SASL_SSL://127.0.0.1:$((base + 20 + me))"
            echo "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL"
            echo "sasl.enabled.mechanisms=SCRAM-SHA-512"
            echo "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
            echo "ssl.keystore.type=PEM"
            echo "ssl.keystore.location=$tls/broker.pem"
            echo "ssl.client.auth=none"
            echo "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            # The PLAINTEXT and CONTROLLER listeners are the cluster's own
            # (loopback, ANONYMOUS): the nodes and this script use them.
            echo "super.users=User:ANONYMOUS;User:admin"
        else
            echo "listeners=PLAINTEXT://127.0.0.1:$((base + me)),CONTROLLER://127.0.0.1:$((base + 10 + me))"
            echo "advertised.listeners=PLAINTEXT://127.0.0.1:$((base + me))"
            echo "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        fi
        echo "log.dirs=$data"
        echo "num.partitions=1"
        echo "offsets.topic.replication.factor=$rf"
        echo "transaction.state.log.replication.factor=$rf"
        echo "transaction.state.log.min.isr=$isr"
        echo "share.coordinator.state.topic.replication.factor=$rf"
        echo "share.coordinator.state.topic.min.isr=$isr"
        echo "group.initial.rebalance.delay.ms=0"
        echo "auto.create.topics.enable=false"
        local kv
        for kv in "${SETS[@]+"${SETS[@]}"}"; do
            echo "$kv"
        done
    } >"$file"
}

stop_dir() {
    local dir=$1 f pid
    [ -d "$dir" ] || return 0
    local pids=()
    for f in "$dir"/node-*/pid "$dir"/watch.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        # The watcher stops the nodes by running this very function (exec:
        # the same pid): it must not kill itself before removing DIR.
        [ "$pid" != "$$" ] || continue
        # Only a process that still runs what this script started.
        # (A node a test killed is gone: nothing to stop.)
        if [ "$f" != "$dir/watch.pid" ] && ! { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q "kafka.Kafka $dir/"; then
            continue
        fi
        kill -CONT "$pid" 2>/dev/null || true
        kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    done
    local waited=0
    for pid in "${pids[@]+"${pids[@]}"}"; do
        while kill -0 "$pid" 2>/dev/null && [ $waited -lt 150 ]; do
            sleep 0.1
            waited=$((waited + 1))
        done
        kill -KILL "$pid" 2>/dev/null || true
    done
    if [ -f "$dir/.made-by-kafka.sh" ]; then
        rm -rf "$dir"
    fi
}

start() {
    START_ARGS=("$@")
    local nodes=1 port=9092 dir="" sasl=0 watch="" heap=512m
    SETS=()
    USERS=()
    while [ $# -gt 0 ]; do
        case $1 in
            --sasl) sasl=1 ;;
            --nodes | --port | --dir | --set | --user | --watch | --heap | --pool)
                [ $# -ge 2 ] || die "$1 needs a value"
                case $1 in
                    --nodes) nodes=$2 ;;
                    --port) port=$2 ;;
                    --dir) dir=$2 ;;
                    --set) SETS+=("$2") ;;
                    --user) USERS+=("$2") ;;
                    --watch) watch=$2 ;;
                    --heap) heap=$2 ;;
                    --pool) POOL=$2 ;;
                esac
                shift
                ;;
            *) die "unknown argument '$1' (try --help)" ;;
        esac
        shift
    done
    [[ $nodes =~ ^[1-9]$ ]] || die "--nodes must be 1 to 9, not '$nodes'"
    local kv
    for kv in "${SETS[@]+"${SETS[@]}"}"; do
        [[ $kv =~ ^[a-z0-9._-]+=[^$'\n']*$ ]] || die "--set takes KEY=VALUE, not '$kv'"
    done
    for kv in "${USERS[@]+"${USERS[@]}"}"; do
        [[ $kv =~ ^[A-Za-z0-9_.-]+=[A-Za-z0-9_.+-]+$ ]] || die "--user takes NAME=PASSWORD (letters, digits, _.-+), not '$kv'"
    done
    fetch
    local base
    if [ "$port" = auto ]; then
        base=$(pick_base "$nodes")
    else
        [[ $port =~ ^[0-9]+$ ]] && [ "$port" -ge 1024 ] && [ "$port" -le 65000 ] || die "--port must be auto or 1024..65000"
        base=$port
        ports_free "$base" "$nodes" || die "a port from $base (clients), $((base + 10)) (controllers) or $((base + 20)) (SASL_SSL) is in use on 127.0.0.1: is a broker running there? (--port auto picks free ones)"
    fi
    if [ -z "$dir" ]; then
        dir=$(mktemp -d "${TMPDIR:-/tmp}/pool_worker-kafka.XXXXXX")
        touch "$dir/.made-by-kafka.sh"
    else
        mkdir -p "$dir"
        dir=$(cd "$dir" && pwd)
        ! ls "$dir"/node-*/pid >/dev/null 2>&1 || die "$dir holds nodes already: scripts/kafka.sh stop --dir $dir first"
    fi
    local t0
    t0=$(now_ms)
    [ "$sasl" = 0 ] || make_tls "$dir/tls"
    local cid
    cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
    local i node scram=()
    if [ "$sasl" = 1 ]; then
        scram+=(--add-scram "SCRAM-SHA-512=[name=admin,password=admin-secret]")
        for kv in "${USERS[@]+"${USERS[@]}"}"; do
            scram+=(--add-scram "SCRAM-SHA-512=[name=${kv%%=*},password=${kv#*=}]")
        done
    fi
    local fmt_pids=()
    for ((i = 1; i <= nodes; i++)); do
        node=$dir/node-$i
        mkdir -p "$node"
        write_config "$node/server.properties" "$i" "$base" "$nodes" "$node/data" "$sasl" "$dir/tls"
        "$JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
            -Dlog4j2.configurationFile="$here/kafka/log4j2-tools.properties" -cp "$LIB/*" \
            kafka.tools.StorageTool format --cluster-id="$cid" -c "$node/server.properties" \
            "${scram[@]+"${scram[@]}"}" >"$node/format.log" 2>&1 &
        fmt_pids+=($!)
    done
    for ((i = 1; i <= nodes; i++)); do
        wait "${fmt_pids[$((i - 1))]}" || {
            cat "$dir/node-$i/format.log" >&2
            die "kafka.tools.StorageTool could not format $dir/node-$i"
        }
    done
    for ((i = 1; i <= nodes; i++)); do
        node=$dir/node-$i
        # shellcheck disable=SC2086
        nohup "$JAVA" -Xms128m -Xmx"$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
            -Djava.awt.headless=true \
            -Dlog4j2.configurationFile="$here/kafka/log4j2.properties" \
            -Dkafka.log.file="$node/kafka.log" \
            -cp "$LIB/*" kafka.Kafka "$node/server.properties" \
            </dev/null >"$node/stdout.log" 2>&1 &
        echo $! >"$node/pid"
    done
    if [ -n "$watch" ]; then
        # Stops the nodes once the watched process is gone (a test binary that
        # ends, or is killed, leaves no broker behind).
        nohup bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" stop --dir "$3"' \
            watch "$watch" "$0" "$dir" </dev/null >/dev/null 2>&1 &
        echo $! >"$dir/watch.pid"
    fi
    local bootstrap="" sasl_bootstrap=""
    for ((i = 0; i < nodes; i++)); do
        bootstrap+="${bootstrap:+,}127.0.0.1:$((base + i))"
        sasl_bootstrap+="${sasl_bootstrap:+,}127.0.0.1:$((base + 20 + i))"
    done
    local t1 ready
    t1=$(now_ms)
    if ! ready=$("$JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dlog4j2.configurationFile="$here/kafka/log4j2-tools.properties" \
        -cp "$CACHE/classes:$LIB/*" Ready "$bootstrap" 120 "$((nodes < 3 ? nodes : 3))" 2>"$dir/ready.log"); then
        for ((i = 1; i <= nodes; i++)); do
            say "node $i's log ($dir/node-$i):"
            tail -n 20 "$dir/node-$i/stdout.log" "$dir/node-$i/kafka.log" >&2 2>/dev/null || true
        done
        cat "$dir/ready.log" >&2
        stop_dir "$dir"
        # A port picked free was taken before a node bound it: try others.
        if [ "$port" = auto ] && [ "${START_TRIES:-0}" -lt 3 ] &&
            grep -qs "Address already in use" "$dir"/node-*/kafka.log "$dir"/node-*/stdout.log; then
            START_TRIES=$((${START_TRIES:-0} + 1))
            say "a port was taken before a node bound it; starting again on other ports"
            rm -rf "$dir"/node-* "$dir/tls" "$dir/watch.pid" "$dir/ready.log"
            start "${START_ARGS[@]+"${START_ARGS[@]}"}"
            return
        fi
        die "Apache Kafka did not become ready at $bootstrap"
    fi
    local t2
    t2=$(now_ms)
    echo "version=$VERSION"
    echo "bootstrap=$bootstrap"
    if [ "$sasl" = 1 ]; then
        echo "sasl_bootstrap=$sasl_bootstrap"
        echo "ca=$dir/tls/ca.pem"
    fi
    echo "dir=$dir"
    echo "tools=$CACHE/bin"
    for ((i = 1; i <= nodes; i++)); do
        echo "node.$i=$(cat "$dir/node-$i/pid") $((base + i - 1))"
    done
    echo "start_ms=$((t2 - t0))"
    say "Apache Kafka $VERSION: $nodes node(s) at $bootstrap${sasl:+}, ready in $((t2 - t0)) ms ($((t1 - t0)) ms to format and launch; ${ready})"
    say "stop with: $0 stop --dir $dir"
    STARTED_DIR=$dir
    STARTED_BOOTSTRAP=$bootstrap
}

run() {
    POOL=""
    local out
    start --watch $$ "$@" >"${TMPDIR:-/tmp}/kafka.sh.$$" || exit 1
    out=$(cat "${TMPDIR:-/tmp}/kafka.sh.$$")
    rm -f "${TMPDIR:-/tmp}/kafka.sh.$$"
    printf '%s\n' "$out"
    local dir bootstrap tools
    dir=$(printf '%s\n' "$out" | sed -n 's/^dir=//p')
    bootstrap=$(printf '%s\n' "$out" | sed -n 's/^bootstrap=//p')
    tools=$(printf '%s\n' "$out" | sed -n 's/^tools=//p')
    trap 'say "stopping"; stop_dir "$dir"; exit 0' INT TERM
    if [ -n "$POOL" ]; then
        [[ $POOL =~ ^[1-9][0-9]*$ ]] || die "--pool must be a number of instances"
        TOPICS_TOOL=$tools/kafka-topics.sh BOOTSTRAP=$bootstrap ORDERS_TOPIC=work_orders \
            COORDINATION_TOPIC=work_claims "$top/scripts/create-topics.sh" >&2 ||
            { stop_dir "$dir"; die "could not create the topics"; }
        local bin=${POOL_WORKER:-}
        if [ -z "$bin" ]; then
            (cd "$top" && cargo build --release --quiet) || { stop_dir "$dir"; die "cargo build failed"; }
            bin=$top/target/release/pool_worker
        fi
        say "the pool: $POOL instances (pool_worker supervise); send orders with:"
        say "  echo 'echo hello' | $tools/kafka-console-producer.sh --bootstrap-server $bootstrap --topic work_orders"
        say "  KAFKA_BROKERS=$bootstrap $bin status"
        KAFKA_BROKERS=$bootstrap ORDERS_TOPIC=work_orders COORDINATION_TOPIC=work_claims \
            STATE_DIR=$dir/state "$bin" supervise --instances "1-$POOL" &
        wait $! || true
        stop_dir "$dir"
        exit 0
    fi
    say "Ctrl-C stops it. Topics for the pool: TOPICS_TOOL=$tools/kafka-topics.sh BOOTSTRAP=$bootstrap scripts/create-topics.sh"
    while :; do sleep 3600 & wait $! || true; done
}

case ${1:-} in
    start) shift; start "$@" ;;
    run) shift; run "$@" ;;
    stop)
        shift
        [ "${1:-}" = --dir ] && [ -n "${2:-}" ] || die "usage: $prog stop --dir DIR"
        stop_dir "$2"
        ;;
    tool)
        shift
        [ -n "${1:-}" ] && [ -n "${TOOLS[$1]:-}" ] || die "tool NAME: one of ${!TOOLS[*]}"
        fetch
        name=$1
        shift
        exec "$CACHE/bin/$name.sh" "$@"
        ;;
    fetch) fetch; echo "lib=$LIB"; echo "tools=$CACHE/bin" ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
