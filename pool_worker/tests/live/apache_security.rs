//! Security on Apache Kafka (issue 25 §2): a SASL_SSL listener with
//! SCRAM-SHA-512, a test CA and `StandardAuthorizer` (scripts/kafka.sh
//! start --sasl); the topics made and the ACLs applied by the commands
//! scripts/create-topics.sh prints, run as printed; the pool configured by
//! deploy/sasl_ssl.env.example (docs/deploy.md's example) runs orders as its
//! principal; the principal allowed only to send orders cannot write the
//! claims topic; a principal with no ACLs gets one line and a non-zero exit
//! from the worker and from every subcommand.

use crate::apache::orders_of;
use crate::common::apache::{Apache, ApacheOpts};
use crate::common::*;
use crate::e2e::{assert_completed_ok_by_committer, assert_ledger_once};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(240);

/// How long one tool may take to give up (it must not retry forever).
const TOOL_LIMIT: Duration = Duration::from_secs(60);

fn checkout() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// deploy/sasl_ssl.env.example as (name, value) pairs, in file order.
fn example() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(checkout().join("deploy/sasl_ssl.env.example"))
        .expect("read deploy/sasl_ssl.env.example");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not KEY=VALUE: {l}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The example with this cluster's addresses and the test's paths: the
/// brokers, the password file and the CA are all that is replaced; the
/// username is the example's unless `user` names another principal.
fn sasl_env(kafka: &Apache, dir: &Path, user: &str, password: &str) -> Vec<(String, String)> {
    let secret = dir.join(format!("{user}.password"));
    std::fs::write(&secret, password).unwrap();
    example()
        .into_iter()
        .map(|(k, v)| {
            let v = match k.as_str() {
                "KAFKA_BROKERS" => kafka.sasl_bootstrap.clone().expect("a SASL listener"),
                "KAFKA_SASL_PASSWORD_FILE" => secret.display().to_string(),
                "KAFKA_SSL_CA_LOCATION" => kafka.ca.as_ref().unwrap().display().to_string(),
                "KAFKA_SASL_USERNAME" => user.to_string(),
                _ => v,
            };
            (k, v)
        })
        .collect()
}

/// Runs `pool_worker ARGS` (no args: worker mode) with `env`; (exit code,
/// stdout, stderr). Panics if it has not exited within [`TOOL_LIMIT`].
pub(crate) fn run(env: &[(String, String)], args: &[&str]) -> (Option<i32>, String, String) {
    let mut child = command()
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pool_worker");
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().unwrap()));
    let err = read(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + TOOL_LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for pool_worker") {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let status = status.unwrap_or_else(|| {
        panic!("pool_worker {args:?} did not exit within {TOOL_LIMIT:?}: it retries instead of saying what is wrong\n{err}")
    });
    (status.code(), out, err)
}

/// The Java clients' settings of the admin user over SASL_SSL (the
/// `--command-config` file of docs/deploy.md, "The topics", with the test
/// CA as trust store).
fn admin_properties(kafka: &Apache, dir: &Path) -> PathBuf {
    let path = dir.join("admin.properties");
    std::fs::write(
        &path,
        format!(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"admin-secret\";\n\
             ssl.truststore.type=PEM\nssl.truststore.location={}\n",
            kafka.ca.as_ref().unwrap().display()
        ),
    )
    .unwrap();
    path
}

/// docs/deploy.md shows deploy/sasl_ssl.env.example as it is: one source
/// for the documentation and the test.
#[test]
fn apache_security_the_documented_example_is_the_tested_file() {
    let file = std::fs::read_to_string(checkout().join("deploy/sasl_ssl.env.example")).unwrap();
    let doc = std::fs::read_to_string(checkout().join("docs/deploy.md")).unwrap();
    assert!(
        doc.contains(&format!("```sh\n{file}```\n")),
        "docs/deploy.md (\"SASL and TLS\") must show deploy/sasl_ssl.env.example verbatim, in a ```sh block"
    );
    let keys: Vec<String> = example().into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            "KAFKA_BROKERS",
            "KAFKA_SECURITY_PROTOCOL",
            "KAFKA_SASL_MECHANISM",
            "KAFKA_SASL_USERNAME",
            "KAFKA_SASL_PASSWORD_FILE",
            "KAFKA_SSL_CA_LOCATION"
        ],
        "the test substitutes these; a new setting needs a look at sasl_env"
    );
}

#[test]
fn apache_security_sasl_ssl_scram_and_the_printed_acls() {
    let dir = tempfile::tempdir().unwrap();
    let kafka = Apache::start(&ApacheOpts {
        sasl: true,
        users: vec![
            ("pool-worker".into(), "pool-secret".into()),
            ("order-sender".into(), "sender-secret".into()),
            ("nobody".into(), "nobody-secret".into()),
        ],
        ..ApacheOpts::default()
    });
    record_figures(&format!(
        "apache_security: SASL_SSL broker ready in {} ms",
        kafka.start_ms
    ));
    let sasl = kafka.sasl_bootstrap.clone().unwrap();
    let admin = admin_properties(&kafka, dir.path());
    let admin = admin.display().to_string();
    let (orders_topic, claims) = (unique_topic("orders"), unique_topic("claims"));
    let topics_env = [
        ("ORDERS_TOPIC", orders_topic.as_str()),
        ("COORDINATION_TOPIC", claims.as_str()),
        ("ORDERS_PARTITIONS", "2"),
        ("BOOTSTRAP", sasl.as_str()),
        ("COMMAND_CONFIG", admin.as_str()),
    ];
    // The topics, made by the admin user over SASL_SSL.
    let out = kafka.create_topics_script(&topics_env, &[]);
    assert!(out.contains("PartitionCount: 1"), "{out}");

    // The ACLs, run as printed (every line that is not a comment).
    let printed = kafka.create_topics_script(
        &topics_env,
        &["--acls", "pool-worker", "--submitter", "User:order-sender"],
    );
    let commands: Vec<&str> = printed
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(commands.len(), 7, "the printed ACL commands:\n{printed}");
    // The pool's group ACL is for its tools (docs/deploy.md): granted only
    // once the workers have run every order without it.
    let (later, now): (Vec<&str>, Vec<&str>) = commands
        .iter()
        .partition(|l| l.contains("User:pool-worker") && l.contains("--group"));
    assert_eq!(later.len(), 1, "the pool's group ACL:\n{printed}");
    let run_acl = |line: &str| {
        let out = std::process::Command::new("bash")
            .args(["-c", line])
            .stdin(Stdio::null())
            .output()
            .expect("run bash");
        assert!(
            out.status.success(),
            "{line}\nfailed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for line in now {
        run_acl(line);
    }

    let with_topics = |mut env: Vec<(String, String)>, state: &str| {
        env.push(("ORDERS_TOPIC".into(), orders_topic.clone()));
        env.push(("COORDINATION_TOPIC".into(), claims.clone()));
        env.push((
            "STATE_DIR".into(),
            dir.path().join(state).display().to_string(),
        ));
        env
    };
    let pool_env = with_topics(
        sasl_env(&kafka, dir.path(), "pool-worker", "pool-secret"),
        "state",
    );
    let sender_env = with_topics(
        sasl_env(&kafka, dir.path(), "order-sender", "sender-secret"),
        "sender",
    );
    let nobody_env = with_topics(
        sasl_env(&kafka, dir.path(), "nobody", "nobody-secret"),
        "nobody",
    );

    // The pool's principal runs orders: three instances under supervise,
    // orders from the stock console producer (the cluster's own listener)
    // and one from `submit --wait` as the order sender.
    let ledger = dir.path().join("ledger");
    let sup = SupervisorProc::start_with(SupervisorOpts {
        instances: "3".into(),
        env: pool_env.clone(),
        ..SupervisorOpts::default()
    });
    kafka.console_produce(&orders_topic, &vec![ledger_order(&ledger); 8]);
    let order = dir.path().join("order.json");
    std::fs::write(&order, ledger_order(&ledger)).unwrap();
    let (code, out, err) = run(
        &sender_env,
        &[
            "submit",
            "--wait",
            "--wait-timeout-secs",
            "120",
            "--json-file",
            &order.display().to_string(),
        ],
    );
    assert_eq!(
        code,
        Some(0),
        "submit --wait as User:order-sender: {out}{err}"
    );
    let orders = orders_of(&kafka, &orders_topic, 2);
    assert_eq!(orders.len(), 9, "8 from the console producer, 1 submitted");
    let audit = wait_and_audit(&kafka.bootstrap, &claims, &orders, LONG);
    audit.check_exactly_once(&orders).unwrap();
    assert_completed_ok_by_committer(&audit);
    assert_ledger_once(&ledger, &orders, &audit);
    // The workers ran every order without a group ACL; the tools need it.
    run_acl(later[0]);
    let (code, out, err) = run(&pool_env, &["status"]);
    assert_eq!(code, Some(0), "status as the pool: {out}{err}");
    assert!(out.contains("9 completed"), "{out}");
    assert!(!err.contains("warning"), "{err}");

    // The order sender cannot write the claims topic: not with a plain
    // producer, not with `cancel`; and nothing lands.
    let before = read_claims(&kafka.bootstrap, &claims).len();
    let forged = try_produce_sasl(&sender_env, &claims, b"9:booted", b"{}");
    assert!(
        forged.as_ref().is_err_and(|e| e.contains("uthorization")),
        "User:order-sender wrote the claims topic: {forged:?}"
    );
    // `cancel` of an order nobody has run (the pool stopped first): it would
    // write a `cancelled` record, and is refused.
    drop(sup);
    kafka.console_produce(&orders_topic, &["true".to_string()]);
    let waiting = orders_of(&kafka, &orders_topic, 2)
        .into_iter()
        .find(|o| !orders.contains(o))
        .expect("the order to cancel");
    let (code, out, err) = run(
        &sender_env,
        &["cancel", &format!("{}:{}", waiting.0, waiting.1)],
    );
    assert_eq!(code, Some(1), "cancel as User:order-sender: {out}{err}");
    assert!(
        err.contains(&format!(
            "not authorized to write topic '{claims}' as User:order-sender"
        )),
        "{err}"
    );
    let after = decoded_claims(&kafka.bootstrap, &claims);
    assert!(
        !after
            .iter()
            .any(|(_, r)| r.event() == pool_worker::record::Event::Cancelled),
        "a cancel landed:\n{}",
        show_all(&after)
    );
    assert!(
        read_claims(&kafka.bootstrap, &claims).len() >= before,
        "the claims topic lost records"
    );
    let (p, o) = orders[0];

    // The principal with no ACLs: one line naming the topic and the
    // principal, and a non-zero exit, from the worker and every subcommand.
    let order_id = format!("{p}:{o}");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("worker", vec![]),
        ("status", vec!["status"]),
        ("history", vec!["history", &order_id]),
        ("audit", vec!["audit"]),
        ("submit", vec!["submit", "--", "true"]),
        ("cancel", vec!["cancel", &order_id]),
        ("retry", vec!["retry", &order_id]),
        ("serve", vec!["serve", "--listen", "127.0.0.1:0"]),
    ];
    let mut env = nobody_env.clone();
    env.push(("INSTANCE_NUMBER".into(), "5".into()));
    for (name, args) in cases {
        let (code, out, err) = run(&env, &args);
        assert!(
            code.is_some_and(|c| c != 0),
            "{name} as User:nobody exited {code:?}\n{out}{err}"
        );
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("not authorized"))
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "{name} as User:nobody: one line, not {lines:?}\n{err}"
        );
        // The claims topic or the orders topic, whichever is asked first.
        assert!(
            lines[0].contains(&format!("topic '{claims}' as User:nobody"))
                || lines[0].contains(&format!("topic '{orders_topic}' as User:nobody")),
            "{name}: {}",
            lines[0]
        );
        let others: Vec<&str> = err
            .lines()
            .filter(|l| {
                // The worker logs librdkafka's own connection reports as
                // warnings (`WARN kafka: ...`, e.g. a TLS connection the
                // broker closed mid-handshake on a busy machine): transient,
                // not what the worker says about its principal.
                let expected = l.contains("not authorized")
                    || l.contains("ALLOWED_COMMANDS")
                    || l.contains("serve: http://")
                    // Without a token the page is read-only, and serve says so.
                    || (name == "serve" && l.contains("the page is read-only"))
                    || (name == "worker" && l.contains(" WARN kafka: "));
                !expected
            })
            .collect();
        assert!(
            others.is_empty(),
            "{name} as User:nobody said more than the one line: {others:?}"
        );
        // The worker: a configuration error, not restarted in a loop.
        if name == "worker" {
            assert_eq!(code, Some(2), "{err}");
        }
    }
}

/// Produces one record to `topic` with the client settings of `env` (the
/// example's variables as librdkafka properties); the delivery's result.
fn try_produce_sasl(
    env: &[(String, String)],
    topic: &str,
    key: &[u8],
    value: &[u8],
) -> Result<Vec<(i32, i64)>, String> {
    let mut brokers = String::new();
    let mut props: Vec<(String, String)> = Vec::new();
    for (k, v) in env {
        match k.as_str() {
            "KAFKA_BROKERS" => brokers = v.clone(),
            "KAFKA_SASL_PASSWORD_FILE" => props.push((
                "sasl.password".into(),
                std::fs::read_to_string(v).expect("the password file"),
            )),
            k if k.starts_with("KAFKA_") => {
                props.push((k[6..].to_lowercase().replace('_', "."), v.clone()))
            }
            _ => {}
        }
    }
    let props: Vec<(&str, &str)> = props
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    try_produce_with(
        &brokers,
        topic,
        &[(Some(key), Some(value))],
        Some(0),
        &props,
    )
}
