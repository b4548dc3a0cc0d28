#!/usr/bin/env bash
# Creates the Kafka topics of a pool_worker pool:
#
#   * the orders topic (ORDERS_TOPIC, default work_orders): ORDERS_PARTITIONS
#     partitions (default 3), cleanup.policy=delete; ORDERS_TOPIC may be a
#     comma-separated list in priority order, as the pool takes it
#     (urgent,work_orders): every topic of it is created alike;
#   * the coordination ("claims") topic (COORDINATION_TOPIC, default
#     work_claims): EXACTLY ONE partition, cleanup.policy=compact;
#   * optionally the results topic (RESULTS_TOPIC, unset = not created):
#     cleanup.policy=delete with a retention time.
#
# docs/deploy.md explains every setting; the short version is in the comments
# next to each one below.
#
# Kafka documentation relied on:
#   * Topic-level configs (cleanup.policy, min.compaction.lag.ms,
#     max.compaction.lag.ms, min.cleanable.dirty.ratio, segment.ms,
#     delete.retention.ms, min.insync.replicas, retention.ms):
#     https://kafka.apache.org/documentation/#topicconfigs
#     (the same text as org.apache.kafka.common.config.TopicConfig).
#   * Log compaction, its guarantees, and "the active segment is never
#     compacted": https://kafka.apache.org/documentation/#compaction
#     (sections "What guarantees does log compaction provide?" and
#     "Configuring The Log Cleaner").
#   * kafka-topics.sh --create/--describe/--if-not-exists/--command-config:
#     https://kafka.apache.org/documentation/#basic_ops_add_topic
#
# Usage: scripts/create-topics.sh [--dry-run] [--bootstrap HOST:PORT]
#          [--orders-topic NAME] [--coordination-topic NAME]
#          [--results-topic NAME] [--orders-partitions N]
#          [--replication-factor N] [--command-config FILE]
#        scripts/create-topics.sh --acls PRINCIPAL [--submitter PRINCIPAL] ...
#
# --acls prints (and runs nothing) the kafka-acls.sh commands that give the
# pool's principal (User:NAME; "NAME" alone means User:NAME) exactly what
# the workers and the status/history tools need, and --submitter those of
# whoever sends orders (`pool_worker submit`; with --wait it also reads the
# claims topic). Nobody else may write the claims topic: whoever can fences
# instances, strands orders and fakes completions (docs/deploy.md,
# "Security"). Kafka's table of operations per request:
# https://kafka.apache.org/documentation/#operations_resources_and_protocols
#
# Every option has an environment variable (the option wins): BOOTSTRAP
# (default: the pool's KAFKA_BROKERS when set, else localhost:9092),
# ORDERS_TOPIC, COORDINATION_TOPIC, RESULTS_TOPIC, ORDERS_PARTITIONS,
# REPLICATION_FACTOR, COMMAND_CONFIG, ACLS, SUBMITTER. Further knobs, by environment only:
#   MIN_INSYNC_REPLICAS          default 2 when REPLICATION_FACTOR >= 3, else 1
#   ORDERS_RETENTION_MS          unset = the broker's default (7 days)
#   RESULTS_RETENTION_MS         default 604800000 (7 days)
#   CLAIMS_MIN_COMPACTION_LAG_MS default 604800000 (7 days)
#   CLAIMS_MAX_COMPACTION_LAG_MS default 691200000 (8 days: the minimum + 1 day)
#   CLAIMS_SEGMENT_MS            default 3600000 (1 hour)
#   CLAIMS_MIN_CLEANABLE_DIRTY_RATIO default 0.1
# (The CLAIMS_* knobs exist for tests that make the cleaner run within
# seconds, pool_worker/tests/live/apache_compaction.rs; docs/protocol.md R43 and R44 say
# how short min.compaction.lag.ms may be.)
#   TOPICS_TOOL                  path of kafka-topics.sh (default: searched)
# (None of this script's variables starts with KAFKA_: pool_worker passes every
# KAFKA_* variable of its environment to librdkafka, so a shared environment
# file must not contain any that librdkafka does not know.)
#
# The embedded development broker (`pool_worker dev`) needs none of this.
set -euo pipefail

prog=${0##*/}

usage() {
    sed -n '/^# Usage:/,/^# The embedded/p' "$0" | sed 's/^# \{0,1\}//'
}

die() {
    printf '%s: %s\n' "$prog" "$*" >&2
    exit 1
}

BOOTSTRAP=${BOOTSTRAP:-${KAFKA_BROKERS:-localhost:9092}}
ORDERS_TOPIC=${ORDERS_TOPIC:-work_orders}
COORDINATION_TOPIC=${COORDINATION_TOPIC:-work_claims}
RESULTS_TOPIC=${RESULTS_TOPIC:-}
ORDERS_PARTITIONS=${ORDERS_PARTITIONS:-3}
REPLICATION_FACTOR=${REPLICATION_FACTOR:-1}
COMMAND_CONFIG=${COMMAND_CONFIG:-}
DRY_RUN=0
ACLS=${ACLS:-}
SUBMITTER=${SUBMITTER:-}

while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) DRY_RUN=1 ;;
        -h | --help) usage; exit 0 ;;
        --bootstrap | --orders-topic | --coordination-topic | --results-topic | \
            --orders-partitions | --replication-factor | --command-config | --acls | --submitter)
            [ $# -ge 2 ] || die "$1 needs a value"
            case $1 in
                --bootstrap) BOOTSTRAP=$2 ;;
                --orders-topic) ORDERS_TOPIC=$2 ;;
                --coordination-topic) COORDINATION_TOPIC=$2 ;;
                --results-topic) RESULTS_TOPIC=$2 ;;
                --orders-partitions) ORDERS_PARTITIONS=$2 ;;
                --replication-factor) REPLICATION_FACTOR=$2 ;;
                --acls) ACLS=$2 ;;
                --submitter) SUBMITTER=$2 ;;
                *) COMMAND_CONFIG=$2 ;; # --command-config
            esac
            shift
            ;;
        *) die "unknown argument '$1' (try --help)" ;;
    esac
    shift
done

is_count() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
is_ms() { [[ $1 =~ ^[0-9]+$ ]]; }

is_count "$ORDERS_PARTITIONS" || die "ORDERS_PARTITIONS must be a positive integer, not '$ORDERS_PARTITIONS'"
is_count "$REPLICATION_FACTOR" || die "REPLICATION_FACTOR must be a positive integer, not '$REPLICATION_FACTOR'"
if [ "$REPLICATION_FACTOR" -ge 3 ]; then
    MIN_INSYNC_REPLICAS=${MIN_INSYNC_REPLICAS:-2}
else
    MIN_INSYNC_REPLICAS=${MIN_INSYNC_REPLICAS:-1}
fi
is_count "$MIN_INSYNC_REPLICAS" || die "MIN_INSYNC_REPLICAS must be a positive integer"
[ "$MIN_INSYNC_REPLICAS" -le "$REPLICATION_FACTOR" ] ||
    die "MIN_INSYNC_REPLICAS ($MIN_INSYNC_REPLICAS) exceeds REPLICATION_FACTOR ($REPLICATION_FACTOR): every write would fail"

ORDERS_RETENTION_MS=${ORDERS_RETENTION_MS:-}
RESULTS_RETENTION_MS=${RESULTS_RETENTION_MS:-604800000}
CLAIMS_MIN_COMPACTION_LAG_MS=${CLAIMS_MIN_COMPACTION_LAG_MS:-604800000}
CLAIMS_MAX_COMPACTION_LAG_MS=${CLAIMS_MAX_COMPACTION_LAG_MS:-691200000}
CLAIMS_SEGMENT_MS=${CLAIMS_SEGMENT_MS:-3600000}
CLAIMS_MIN_CLEANABLE_DIRTY_RATIO=${CLAIMS_MIN_CLEANABLE_DIRTY_RATIO:-0.1}
for v in RESULTS_RETENTION_MS CLAIMS_MIN_COMPACTION_LAG_MS CLAIMS_MAX_COMPACTION_LAG_MS CLAIMS_SEGMENT_MS; do
    is_ms "${!v}" || die "$v must be a number of milliseconds, not '${!v}'"
done
[[ $CLAIMS_MIN_CLEANABLE_DIRTY_RATIO =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] ||
    die "CLAIMS_MIN_CLEANABLE_DIRTY_RATIO must be a number from 0 to 1, not '$CLAIMS_MIN_CLEANABLE_DIRTY_RATIO'"
[ "$CLAIMS_SEGMENT_MS" -ge 1 ] || die "CLAIMS_SEGMENT_MS must be at least 1"
[ -z "$ORDERS_RETENTION_MS" ] || [ "$ORDERS_RETENTION_MS" = -1 ] || is_ms "$ORDERS_RETENTION_MS" ||
    die "ORDERS_RETENTION_MS must be a number of milliseconds or -1"
[ "$CLAIMS_MAX_COMPACTION_LAG_MS" -ge "$CLAIMS_MIN_COMPACTION_LAG_MS" ] ||
    die "CLAIMS_MAX_COMPACTION_LAG_MS must be >= CLAIMS_MIN_COMPACTION_LAG_MS"

# ORDERS_TOPIC: one topic, or a comma-separated list in priority order
# (docs/deploy.md, "Priorities").
IFS=, read -r -a order_topics <<<"$ORDERS_TOPIC"
[ ${#order_topics[@]} -ge 1 ] || die "ORDERS_TOPIC names no topic"
for i in "${!order_topics[@]}"; do
    t=${order_topics[$i]}
    t=${t#"${t%%[![:space:]]*}"}
    order_topics[$i]=${t%"${t##*[![:space:]]}"}
done
for t in "${order_topics[@]}" "$COORDINATION_TOPIC" ${RESULTS_TOPIC:+"$RESULTS_TOPIC"}; do
    [[ $t =~ ^[A-Za-z0-9._-]{1,249}$ ]] || die "'$t' is not a valid Kafka topic name"
done
[ "$(printf '%s\n' "${order_topics[@]}" | sort | uniq -d)" = "" ] || die "ORDERS_TOPIC names a topic twice"
for t in "${order_topics[@]}"; do
    [ "$t" != "$COORDINATION_TOPIC" ] || die "the orders and coordination topics must differ"
    [ "$t" != "$RESULTS_TOPIC" ] || die "the results topic must differ from the orders and coordination topics"
done
[ "$RESULTS_TOPIC" != "$COORDINATION_TOPIC" ] || [ -z "$RESULTS_TOPIC" ] ||
    die "the results topic must differ from the orders and coordination topics"

# Find kafka-topics.sh (Apache tarball / apache/kafka image) or kafka-topics
# (Confluent packages).
TOOL=${TOPICS_TOOL:-}
if [ -z "$TOOL" ]; then
    for candidate in kafka-topics.sh kafka-topics /opt/kafka/bin/kafka-topics.sh \
        ${KAFKA_HOME:+"$KAFKA_HOME/bin/kafka-topics.sh"}; do
        if command -v "$candidate" >/dev/null 2>&1; then
            TOOL=$(command -v "$candidate")
            break
        fi
    done
fi

common=(--bootstrap-server "$BOOTSTRAP")
[ -z "$COMMAND_CONFIG" ] || common+=(--command-config "$COMMAND_CONFIG")

# --- the topics -------------------------------------------------------------

orders=(--create --if-not-exists --topic ORDERS
    --partitions "$ORDERS_PARTITIONS" --replication-factor "$REPLICATION_FACTOR"
    --config cleanup.policy=delete
    --config min.insync.replicas="$MIN_INSYNC_REPLICAS")
# An order deleted by retention before an instance claims it is never run:
# keep this longer than the longest backlog you can have.
[ -z "$ORDERS_RETENTION_MS" ] || orders+=(--config retention.ms="$ORDERS_RETENTION_MS")

claims=(--create --if-not-exists --topic "$COORDINATION_TOPIC"
    # One partition: the log's order IS the protocol's total order; every
    # instance must see every record in the same order.
    --partitions 1 --replication-factor "$REPLICATION_FACTOR"
    # Keep the newest record per key <instance>:<event>, forever.
    --config cleanup.policy=compact
    # Records younger than this are never compacted. The protocol relies on
    # it (docs/protocol.md R43, R44): the records of a negotiation that
    # is still open must all be there when an instance decides or resumes it,
    # counted from the first record about the order (R43). 7 days
    # covers an instance that is down, claim undecided, for days. It must
    # also exceed how long an append can be in flight, the producer's
    # message.timeout.ms (10 s; R44).
    --config min.compaction.lag.ms="$CLAIMS_MIN_COMPACTION_LAG_MS"
    # ...but compact a day after that even when the log is quiet, so that a
    # boot replay stays short: the minimum + 1 day, 8 days (Kafka refuses a
    # value below min.compaction.lag.ms).
    --config max.compaction.lag.ms="$CLAIMS_MAX_COMPACTION_LAG_MS"
    # The active segment is never compacted and the default roll is 7 days /
    # 1 GiB, which this small topic would not reach: roll hourly.
    --config segment.ms="$CLAIMS_SEGMENT_MS"
    # The log is small and is replayed at every boot: clean when 10% of it is
    # superseded records rather than the default 50%.
    --config min.cleanable.dirty.ratio="$CLAIMS_MIN_CLEANABLE_DIRTY_RATIO"
    # pool_worker writes no tombstones; an operator may (to forget a retired
    # instance). Keep them a day so that every reader sees them.
    --config delete.retention.ms=86400000
    --config min.insync.replicas="$MIN_INSYNC_REPLICAS"
    # Losing an acknowledged claims record would break run-exactly-once.
    --config unclean.leader.election.enable=false)

results=()
if [ -n "$RESULTS_TOPIC" ]; then
    # An output stream, not state: one record per order outcome (the
    # authoritative outcome is the `completed` record in the claims topic).
    # Keys are unique per order, so compaction would reclaim almost nothing;
    # plain time retention instead.
    results=(--create --if-not-exists --topic "$RESULTS_TOPIC"
        --partitions "$ORDERS_PARTITIONS" --replication-factor "$REPLICATION_FACTOR"
        --config cleanup.policy=delete
        --config retention.ms="$RESULTS_RETENTION_MS"
        --config min.insync.replicas="$MIN_INSYNC_REPLICAS")
fi

# Prints a command line that a shell reads back as the same words.
quote() {
    if [[ $1 =~ ^[A-Za-z0-9_./:=,@+-]+$ ]]; then
        printf '%s' "$1"
    else
        printf "'%s'" "${1//\'/\'\\\'\'}"
    fi
}

show() {
    local first=1 word
    for word in "$@"; do
        [ "$first" = 1 ] || printf ' '
        first=0
        quote "$word"
    done
    printf '\n'
}

print_all() {
    local tool=$1
    for t in "${order_topics[@]}"; do
        show "$tool" "${common[@]}" "${orders[@]/#ORDERS/$t}"
    done
    show "$tool" "${common[@]}" "${claims[@]}"
    [ ${#results[@]} -eq 0 ] || show "$tool" "${common[@]}" "${results[@]}"
}

# --- the ACLs (printed only) ---------------------------------------------------

principal() {
    case $1 in
        *:*) printf '%s' "$1" ;;
        *) printf 'User:%s' "$1" ;;
    esac
}

if [ -n "$ACLS" ]; then
    [[ $ACLS =~ ^[A-Za-z0-9_.@=,:+-]+$ ]] || die "'$ACLS' is not a principal name (User:NAME)"
    [ -z "$SUBMITTER" ] || [[ $SUBMITTER =~ ^[A-Za-z0-9_.@=,:+-]+$ ]] || die "'$SUBMITTER' is not a principal name"
    acl_tool=kafka-acls.sh
    if [ -n "$TOOL" ]; then
        acl_tool=${TOOL%/*}/kafka-acls${TOOL##*/kafka-topics}
    fi
    pool=$(principal "$ACLS")
    add=("$acl_tool" "${common[@]}" --add --allow-principal "$pool")
    echo "# The pool ($pool): every worker, and the status/history tools."
    echo "# Orders: read them and their end offsets (Read implies Describe)."
    for t in "${order_topics[@]}"; do
        show "${add[@]}" --operation Read --operation Describe --topic "$t"
    done
    echo "# Claims: the only principal that writes them; DescribeConfigs: a worker checks at boot"
    echo "# that the topic is compacted (without it, it warns and cannot tell)."
    show "${add[@]}" --operation Read --operation Write --operation Describe --operation DescribeConfigs --topic "$COORDINATION_TOPIC"
    if [ -n "$RESULTS_TOPIC" ]; then
        echo "# Results: published, never read."
        show "${add[@]}" --operation Write --operation Describe --topic "$RESULTS_TOPIC"
    fi
    echo "# Consumer groups pool_worker-*, for the tools (status, history, audit, serve): nothing is"
    echo "# committed, but librdkafka looks up the coordinator of a consumer's group.id (Describe)."
    echo "# The workers' consumer has no group.id."
    show "${add[@]}" --operation Describe --group pool_worker- --resource-pattern-type prefixed
    echo "# Transactional ids pool_worker.$COORDINATION_TOPIC.*: each claims record is a transaction, and a"
    echo "# new process fences its dead predecessor with init_transactions (docs/protocol.md R16)."
    show "${add[@]}" --operation Write --operation Describe --transactional-id "pool_worker.$COORDINATION_TOPIC." --resource-pattern-type prefixed
    echo "# Only with KAFKA_ENABLE_IDEMPOTENCE=true on brokers older than 2.8 (KIP-679; from 2.8 on,"
    echo "# Write on a topic is enough):"
    printf '# '
    show "${add[@]}" --operation IdempotentWrite --cluster
    if [ -n "$SUBMITTER" ]; then
        sub=$(principal "$SUBMITTER")
        adds=("$acl_tool" "${common[@]}" --add --allow-principal "$sub")
        echo "# Whoever sends orders ($sub): anyone who can write the orders topic makes the pool run"
        echo "# what the allow lists allow."
        for t in "${order_topics[@]}"; do
            show "${adds[@]}" --operation Write --operation Describe --topic "$t"
        done
        echo "# ...and, for submit --wait, reads the claims topic (never writes it):"
        show "${adds[@]}" --operation Read --operation Describe --topic "$COORDINATION_TOPIC"
        show "${adds[@]}" --operation Describe --group pool_worker- --resource-pattern-type prefixed
    fi
    echo "# No other principal may Write, Delete (DeleteRecords) or AlterConfigs the claims topic."
    exit 0
fi

if [ "$DRY_RUN" = 1 ]; then
    print_all "${TOOL:-kafka-topics.sh}"
    echo "# then check that $COORDINATION_TOPIC has PartitionCount: 1 and cleanup.policy=compact:"
    show "${TOOL:-kafka-topics.sh}" "${common[@]}" --describe --topic "$COORDINATION_TOPIC"
    exit 0
fi

if [ -z "$TOOL" ]; then
    {
        echo "$prog: kafka-topics.sh (or kafka-topics) is not on PATH; no topic was created."
        echo "Run these commands where Kafka's command-line tools are installed, e.g. in the broker's"
        echo "container (docker compose -f deploy/compose.yaml exec kafka ...; the tools are in /opt/kafka/bin),"
        echo "or set TOPICS_TOOL=/path/to/kafka-topics.sh and run this script again:"
        echo
        print_all kafka-topics.sh | sed 's/^/    /'
        echo
        echo "(The embedded development broker, 'pool_worker dev', needs no topics.)"
    } >&2
    exit 1
fi

echo "$prog: using $TOOL against $BOOTSTRAP"
for t in "${order_topics[@]}"; do
    "$TOOL" "${common[@]}" "${orders[@]/#ORDERS/$t}"
done
"$TOOL" "${common[@]}" "${claims[@]}"
[ ${#results[@]} -eq 0 ] || "$TOOL" "${common[@]}" "${results[@]}"

# --if-not-exists keeps a topic that already exists whatever its settings:
# check the one setting that cannot be repaired in place.
desc=$("$TOOL" "${common[@]}" --describe --topic "$COORDINATION_TOPIC")
printf '%s\n' "$desc"
count=$(printf '%s\n' "$desc" | grep -o 'PartitionCount: *[0-9]*' | head -n 1 | grep -o '[0-9]*$' || true)
if [ "$count" != 1 ]; then
    die "coordination topic $COORDINATION_TOPIC has ${count:-an unknown number of} partitions, it must have exactly 1. Partitions cannot be removed: delete and recreate it (kafka-topics.sh --delete) while no instance runs, or choose another COORDINATION_TOPIC."
fi
if ! printf '%s\n' "$desc" | grep -q 'cleanup\.policy=compact'; then
    echo "$prog: WARNING: $COORDINATION_TOPIC does not show cleanup.policy=compact; with time retention an idle instance's records would expire. Fix with:" >&2
    configs_tool=${TOOL%/*}/kafka-configs${TOOL##*/kafka-topics}
    show "$configs_tool" "${common[@]}" --alter --entity-type topics \
        --entity-name "$COORDINATION_TOPIC" --add-config cleanup.policy=compact >&2
fi
echo "$prog: topics ready: ${order_topics[*]}, $COORDINATION_TOPIC${RESULTS_TOPIC:+, $RESULTS_TOPIC}"
