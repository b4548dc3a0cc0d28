//! Apache Kafka in the tests: `scripts/kafka.sh` (the pinned Apache Kafka
//! from Maven Central, KRaft mode, on loopback) started from a test.
//!
//! * [`shared`]: one single-node broker for the whole test binary, started by
//!   the first test that asks and stopped by the script's watcher when the
//!   test binary exits. Tests share it and make their own topics
//!   ([`Apache::topics`], [`Apache::create_topics_script`]).
//! * [`Apache::start`]: a cluster of its own (three nodes, SASL_SSL, broker
//!   settings), stopped when dropped: for tests that kill or stop brokers or
//!   change broker-wide settings.
//!
//! Java 17+ must be installed, and Maven on the first run (which fills the
//! cache); `.ci/run` installs both.

#![allow(dead_code)]

use super::{unique_topic, KAFKA_TIMEOUT};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// What `scripts/kafka.sh start` is asked for.
#[derive(Clone, Debug, Default)]
pub struct ApacheOpts {
    /// Nodes (each broker and controller); 0 means 1.
    pub nodes: u32,
    /// A SASL_SSL listener with SCRAM-SHA-512 and ACLs enforced.
    pub sasl: bool,
    /// SCRAM users besides admin: (name, password).
    pub users: Vec<(String, String)>,
    /// Broker settings for every node (`--set KEY=VALUE`).
    pub settings: Vec<(String, String)>,
}

/// A running Apache Kafka cluster started by `scripts/kafka.sh`.
pub struct Apache {
    /// The PLAINTEXT bootstrap list (the cluster's own listener: a super
    /// user when ACLs are on).
    pub bootstrap: String,
    /// The SASL_SSL bootstrap list and the test CA, with `sasl`.
    pub sasl_bootstrap: Option<String>,
    pub ca: Option<PathBuf>,
    /// The directory of the tools' wrappers (`kafka-topics.sh`, ...).
    pub tools: PathBuf,
    pub dir: PathBuf,
    /// Node id → (pid, PLAINTEXT port).
    pub nodes: BTreeMap<u32, (u32, u16)>,
    /// How long the script took from format to a record round trip.
    pub start_ms: u64,
    /// Stop the cluster when dropped (not the shared one).
    own: bool,
}

/// The checkout's `scripts/` directory.
pub fn scripts() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("scripts")
}

static SHARED: OnceLock<Apache> = OnceLock::new();

/// The test binary's single-node Apache Kafka (started once; stopped by the
/// script's watcher when this process exits).
pub fn shared() -> &'static Apache {
    SHARED.get_or_init(|| Apache::launch(&ApacheOpts::default(), false))
}

impl Apache {
    /// A cluster of the test's own, stopped when dropped.
    pub fn start(opts: &ApacheOpts) -> Apache {
        Apache::launch(opts, true)
    }

    fn launch(opts: &ApacheOpts, own: bool) -> Apache {
        let mut cmd = Command::new(scripts().join("kafka.sh"));
        cmd.args(["start", "--port", "auto"])
            .args(["--nodes", &opts.nodes.max(1).to_string()])
            .args(["--watch", &std::process::id().to_string()]);
        if opts.sasl {
            cmd.arg("--sasl");
        }
        for (name, password) in &opts.users {
            cmd.args(["--user", &format!("{name}={password}")]);
        }
        for (k, v) in &opts.settings {
            cmd.args(["--set", &format!("{k}={v}")]);
        }
        let out = cmd
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run scripts/kafka.sh: {e}"));
        assert!(
            out.status.success(),
            "scripts/kafka.sh start failed ({}): Apache Kafka needs Java 17+ and, once, Maven; see its output above",
            out.status
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let mut kv = BTreeMap::new();
        for line in text.lines() {
            if let Some((k, v)) = line.split_once('=') {
                kv.insert(k.to_string(), v.to_string());
            }
        }
        let get = |k: &str| {
            kv.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("scripts/kafka.sh printed no {k}=: {text}"))
        };
        let mut nodes = BTreeMap::new();
        for (k, v) in &kv {
            if let Some(id) = k.strip_prefix("node.") {
                let mut it = v.split_whitespace();
                let pid = it.next().and_then(|p| p.parse().ok()).expect("node pid");
                let port = it.next().and_then(|p| p.parse().ok()).expect("node port");
                nodes.insert(id.parse().expect("node id"), (pid, port));
            }
        }
        Apache {
            bootstrap: get("bootstrap"),
            sasl_bootstrap: kv.get("sasl_bootstrap").cloned(),
            ca: kv.get("ca").map(PathBuf::from),
            tools: PathBuf::from(get("tools")),
            dir: PathBuf::from(get("dir")),
            nodes,
            start_ms: get("start_ms").parse().unwrap_or(0),
            own,
        }
    }

    /// The pool's environment against this cluster with the workers'
    /// defaults: only the addresses, the topics and a `STATE_DIR`.
    pub fn env(&self, orders: &str, claims: &str, state: &Path) -> Vec<(String, String)> {
        vec![
            ("KAFKA_BROKERS".into(), self.bootstrap.clone()),
            ("ORDERS_TOPIC".into(), orders.into()),
            ("COORDINATION_TOPIC".into(), claims.into()),
            ("STATE_DIR".into(), state.display().to_string()),
        ]
    }

    /// Fresh orders (`partitions`) and claims topics, made with rdkafka's
    /// admin client with the settings scripts/create-topics.sh gives (for
    /// tests that do not test the script itself). Returns (orders, claims).
    pub fn topics(&self, partitions: i32) -> (String, String) {
        self.topics_shaped(partitions, 1, "compact")
    }

    /// [`Apache::topics`] with a claims topic of `claims_partitions`
    /// partitions and this `cleanup.policy` (for the tests of what a worker
    /// says about a claims topic it cannot work with).
    pub fn topics_shaped(
        &self,
        partitions: i32,
        claims_partitions: i32,
        cleanup: &str,
    ) -> (String, String) {
        let orders = unique_topic("orders");
        let claims = unique_topic("claims");
        let rf = self.nodes.len().min(3) as i32;
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .expect("admin client");
        let claims_configs = [
            ("cleanup.policy", cleanup),
            ("min.compaction.lag.ms", "604800000"),
            ("max.compaction.lag.ms", "691200000"),
            ("segment.ms", "3600000"),
            ("min.cleanable.dirty.ratio", "0.1"),
            ("delete.retention.ms", "86400000"),
            ("unclean.leader.election.enable", "false"),
        ];
        let mut claims_topic =
            NewTopic::new(&claims, claims_partitions, TopicReplication::Fixed(rf));
        for (k, v) in claims_configs {
            claims_topic = claims_topic.set(k, v);
        }
        let orders_topic = NewTopic::new(&orders, partitions, TopicReplication::Fixed(rf));
        let rt = tokio_rt();
        let res = rt
            .block_on(admin.create_topics(
                [&orders_topic, &claims_topic],
                &AdminOptions::new().operation_timeout(Some(KAFKA_TIMEOUT)),
            ))
            .expect("create topics");
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
        }
        (orders, claims)
    }

    /// One more fresh orders topic of `partitions` (a priority topic in
    /// front of [`Apache::topics`]' orders topic, R57).
    pub fn orders_topic(&self, prefix: &str, partitions: i32) -> String {
        let name = unique_topic(prefix);
        let rf = self.nodes.len().min(3) as i32;
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .expect("admin client");
        let topic = NewTopic::new(&name, partitions, TopicReplication::Fixed(rf));
        let res = tokio_rt()
            .block_on(admin.create_topics(
                [&topic],
                &AdminOptions::new().operation_timeout(Some(KAFKA_TIMEOUT)),
            ))
            .expect("create topic");
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
        }
        name
    }

    /// Runs `scripts/create-topics.sh` against this cluster with `env`
    /// (its variables: ORDERS_TOPIC, COORDINATION_TOPIC, CLAIMS_*, ...) and
    /// `args`; returns its standard output, panics when it fails.
    pub fn create_topics_script(&self, env: &[(&str, &str)], args: &[&str]) -> String {
        let out = Command::new(scripts().join("create-topics.sh"))
            .args(args)
            .env("BOOTSTRAP", &self.bootstrap)
            .env("TOPICS_TOOL", self.tools.join("kafka-topics.sh"))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/create-topics.sh");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "scripts/create-topics.sh failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Runs one of Kafka's tools (`kafka-topics`, `kafka-acls`, ...) with
    /// `args` and `stdin`; returns (success, stdout, stderr).
    pub fn tool(&self, name: &str, args: &[&str], stdin: &str) -> (bool, String, String) {
        use std::io::Write;
        let mut child = Command::new(self.tools.join(format!("{name}.sh")))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
        let mut input = child.stdin.take().expect("piped stdin");
        input
            .write_all(stdin.as_bytes())
            .expect("write the tool's stdin");
        drop(input);
        let out = child.wait_with_output().expect("the tool's output");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Sends `lines` as orders with Kafka's own console producer (a stock
    /// client), one message per line, to `topic`.
    pub fn console_produce(&self, topic: &str, lines: &[String]) {
        let mut input = lines.join("\n");
        input.push('\n');
        let (ok, _, err) = self.tool(
            "kafka-console-producer",
            &[
                "--bootstrap-server",
                &self.bootstrap,
                "--topic",
                topic,
                "--command-property",
                "acks=all",
            ],
            &input,
        );
        assert!(ok, "kafka-console-producer failed: {err}");
    }

    /// The process id of node `id`.
    pub fn pid(&self, id: u32) -> u32 {
        self.nodes[&id].0
    }
}

impl Drop for Apache {
    fn drop(&mut self) {
        if self.own {
            let _ = Command::new(scripts().join("kafka.sh"))
                .args(["stop", "--dir"])
                .arg(&self.dir)
                .stdin(Stdio::null())
                .status();
        }
    }
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// How long a test may wait for Apache Kafka's own tools.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(60);
