// scripts/kafka.sh's readiness check, run as a single-file program
// (`java -cp LIB/* Ready.java BOOTSTRAP SECONDS [REPLICAS]`): creates a topic,
// produces one record, reads it back and deletes the topic, retrying until
// all of it works or SECONDS pass. Prints the time the round trip took.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class Ready {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        long deadline = System.nanoTime() + Long.parseLong(args[1]) * 1_000_000_000L;
        short replicas = args.length > 2 ? Short.parseShort(args[2]) : 1;
        Exception last = null;
        while (System.nanoTime() < deadline) {
            try {
                long t0 = System.nanoTime();
                roundTrip(bootstrap, replicas);
                System.out.printf("round trip %d ms%n", (System.nanoTime() - t0) / 1_000_000);
                return;
            } catch (Exception e) {
                last = e;
                Thread.sleep(250);
            }
        }
        System.err.println("not ready: " + last);
        System.exit(1);
    }

    static void roundTrip(String bootstrap, short replicas) throws Exception {
        String topic = "pool_worker_ready_" + UUID.randomUUID();
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        common.put("request.timeout.ms", "5000");
        common.put("default.api.timeout.ms", "10000");
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, replicas))).all().get();
            try {
                Properties p = new Properties();
                p.putAll(common);
                p.put("acks", "all");
                p.put("delivery.timeout.ms", "10000");
                try (Producer<String, String> producer =
                        new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
                    producer.send(new ProducerRecord<>(topic, "ready", "ready")).get();
                }
                Properties c = new Properties();
                c.putAll(common);
                try (Consumer<String, String> consumer =
                        new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
                    TopicPartition tp = new TopicPartition(topic, 0);
                    consumer.assign(List.of(tp));
                    consumer.seekToBeginning(List.of(tp));
                    long until = System.nanoTime() + 10_000_000_000L;
                    while (System.nanoTime() < until) {
                        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                            if ("ready".equals(r.value())) return;
                        }
                    }
                    throw new IllegalStateException("the record did not come back");
                }
            } finally {
                admin.deleteTopics(List.of(topic)).all().get();
            }
        }
    }
}
