// The bench's share-group peer (pool_worker/benches/pool.rs): N members of one Kafka
// share group (KIP-932, KafkaShareConsumer), threads of this JVM, each
// running every record it gets as a command line (split on spaces, no shell)
// and acknowledging it with ACCEPT once the command ended (explicit
// acknowledgement mode, committed with commitSync).
//
// Run as a single-file program on the broker's own jars:
//   java -cp 'LIB/*' bench/ShareGroup.java BOOTSTRAP TOPIC GROUP MEMBERS COUNT SECONDS [MAX_POLL]
// Prints "ready" once every member has polled once and the group is Stable
// with every member assigned (joined), then one line
// "done PARTITION OFFSET EPOCH_MS" per record whose command ended, and "end
// DONE" when COUNT records were done (COUNT 0: never) or SECONDS passed.
// MAX_POLL > 0: each member acquires at most MAX_POLL records at a time
// (share.acquire.mode=record_limit, max.poll.records=MAX_POLL), so that the
// records of one partition are spread over the members as a work queue
// spreads them; 0 or absent: Kafka's defaults (batch_optimized: a member
// may acquire a whole batch and run it alone while the others wait).
// Environment SHARE_CONSUMER_CONFIG="key=value,key=value": further consumer
// settings (the bench's BENCH_SHARE_CONFIG).
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareGroup {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int members = Integer.parseInt(args[3]);
        int count = Integer.parseInt(args[4]) > 0 ? Integer.parseInt(args[4]) : Integer.MAX_VALUE;
        long deadline = System.nanoTime() + Long.parseLong(args[5]) * 1_000_000_000L;
        int maxPoll = args.length > 6 ? Integer.parseInt(args[6]) : 0;
        // A share group starts at the log's end by default: this one reads
        // the orders already there too.
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                    new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get();
        }
        AtomicInteger done = new AtomicInteger();
        CountDownLatch joined = new CountDownLatch(members);
        Object out = new Object();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            Thread t = new Thread(() -> {
                Properties p = new Properties();
                p.put("bootstrap.servers", bootstrap);
                p.put("group.id", group);
                p.put("share.acknowledgement.mode", "explicit");
                String extra = System.getenv("SHARE_CONSUMER_CONFIG");
                if (extra != null) {
                    for (String kv : extra.split(",")) {
                        String[] e = kv.split("=", 2);
                        if (e.length == 2) p.put(e[0].trim(), e[1].trim());
                    }
                }
                if (maxPoll > 0) {
                    p.put("share.acquire.mode", "record_limit");
                    p.put("max.poll.records", Integer.toString(maxPoll));
                }
                try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(
                        p, new StringDeserializer(), new StringDeserializer())) {
                    c.subscribe(List.of(topic));
                    boolean first = true;
                    while (done.get() < count && System.nanoTime() < deadline) {
                        ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(100));
                        if (first) {
                            joined.countDown();
                            first = false;
                        }
                        for (ConsumerRecord<String, String> r : recs) {
                            try {
                                new ProcessBuilder(r.value().trim().split(" +"))
                                    .redirectOutput(ProcessBuilder.Redirect.DISCARD)
                                    .redirectError(ProcessBuilder.Redirect.DISCARD)
                                    .start().waitFor();
                            } catch (Exception e) {
                                // A command that cannot start is done too (as the pool's "failed").
                            }
                            c.acknowledge(r, AcknowledgeType.ACCEPT);
                            long at = System.currentTimeMillis();
                            done.incrementAndGet();
                            synchronized (out) {
                                System.out.println("done " + r.partition() + " " + r.offset() + " " + at);
                                System.out.flush();
                            }
                        }
                        if (!recs.isEmpty()) c.commitSync();
                    }
                }
            });
            t.start();
            threads.add(t);
        }
        // Joined: every member has polled, and the group is Stable with
        // every member in it holding its share of the partitions (a
        // member's first polls return before its assignment).
        boolean ready = joined.await(60, TimeUnit.SECONDS);
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            while (ready && System.nanoTime() < deadline) {
                ShareGroupDescription d;
                try {
                    d = admin.describeShareGroups(List.of(group)).all().get().get(group);
                } catch (ExecutionException e) {
                    // Not known yet (GroupIdNotFound): the members are joining.
                    Thread.sleep(100);
                    continue;
                }
                if (d.groupState() == org.apache.kafka.common.GroupState.STABLE
                        && d.members().size() == members
                        && d.members().stream().allMatch(m -> !m.assignment().topicPartitions().isEmpty()
                            && m.memberEpoch() == d.targetAssignmentEpoch())) {
                    break;
                }
                Thread.sleep(100);
            }
        }
        if (ready) {
            synchronized (out) {
                System.out.println("ready");
                System.out.flush();
            }
        }
        for (Thread t : threads) t.join();
        System.out.println("end " + done.get());
    }
}
