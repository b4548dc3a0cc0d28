//! Settling: a process boots only after its predecessor's appends settled.
//!
//! A process that dies (SIGKILL, OOM, power) may leave produce requests on
//! the wire, and the broker may still append them after the supervisor has
//! started the next process of the same instance number. Such a record
//! lands after its successor's `booted`, where the fence voids it — but
//! compaction can later erase that fence and leave the dead process's
//! record in place, and a dead process's late `booted` fences its live
//! successor (docs/protocol.md, "Settling", has both counter-examples,
//! found by the model check). So the rule is: **a process appends its
//! `booted` only once every append of the previous process of its number
//! has landed or been lost.**
//!
//! The shell cannot see a dead process's requests, so it waits them out:
//! `SETTLE_MS` (15 s: librdkafka gives up on an unacknowledged message
//! after `message.timeout.ms`, 10 s, src/kafka.rs, and the broker has
//! answered or dropped a request long before that) after its own start,
//! which is after its predecessor's death. Waiting after *every* exit
//! would cost 15 s per order, so a process that exits with every append
//! acknowledged leaves a **clean-exit marker** on this host naming its
//! incarnation, and the next process boots at once if the log agrees that
//! this incarnation is still its number's current one
//! (`Worker::start_after`, `Phase::Settle`). The marker is taken (read and
//! removed) before anything is appended, so a process that dies after
//! that leaves none, and its successor waits.
//!
//! The marker is an optimisation, never trusted alone: a missing,
//! unreadable or stale one (the instance ran elsewhere since) only costs
//! the wait. Its name holds the brokers, the claims topic and the instance
//! number, so pools that share a host do not mix their markers.

use crate::config::Config;
use std::path::{Path, PathBuf};

/// The default `SETTLE_MS`: librdkafka's `message.timeout.ms` (10 s, set in
/// src/kafka.rs) plus 5 s for the broker's own queueing.
pub const DEFAULT_SETTLE_MS: u64 = 15_000;

/// Where this instance's clean-exit marker lives.
pub fn marker_path(cfg: &Config) -> PathBuf {
    let safe = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect()
    };
    let mut name = format!("{}-{}-{}.clean", safe(&cfg.brokers), safe(&cfg.coordination_topic), cfg.instance);
    if name.len() > 200 {
        // A long broker list or topic name: file names stop at 255 bytes.
        let pool = format!("{}\n{}", cfg.brokers, cfg.coordination_topic);
        name = format!("{:016x}-{}.clean", fnv1a(pool.as_bytes()), cfg.instance);
    }
    cfg.state_dir.join(name)
}

/// A hash that is the same in every process (unlike std's `RandomState`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Reads and removes the marker: the incarnation it names, if any. Any
/// problem (none there, unreadable, not removable) counts as "no marker".
pub fn take(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    // Not removed: the next process would trust it again, so ignore it.
    std::fs::remove_file(path).ok()?;
    let inc = text.trim();
    (!inc.is_empty() && inc.len() <= 200).then(|| inc.to_string())
}

/// Leaves the marker for `incarnation` (written whole, then renamed into
/// place). Called only after every append was acknowledged. A failure is
/// logged and costs the next process the wait, nothing else.
pub fn leave(path: &Path, incarnation: &str) {
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, incarnation)?;
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        tracing::warn!(path = %path.display(), error = %e, "cannot leave the clean-exit marker; the next process will wait SETTLE_MS before booting");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &Path, brokers: &str, instance: &str) -> Config {
        let vars = [
            ("ORDERS_TOPIC", "o"),
            ("COORDINATION_TOPIC", "claims"),
            ("INSTANCE_NUMBER", instance),
            ("KAFKA_BROKERS", brokers),
            ("STATE_DIR", dir.to_str().unwrap()),
        ];
        Config::from_vars(vars.iter().map(|(a, b)| (a.to_string(), b.to_string()))).unwrap()
    }

    #[test]
    fn a_marker_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = marker_path(&cfg(&dir.path().join("sub"), "127.0.0.1:9092", "3"));
        assert_eq!(take(&path), None, "no marker yet");
        leave(&path, "abc-1");
        assert_eq!(take(&path), Some("abc-1".to_string()));
        assert_eq!(take(&path), None, "taking removes it: a process that dies next leaves none");
    }

    #[test]
    fn pools_and_instances_do_not_share_markers() {
        let dir = tempfile::tempdir().unwrap();
        let a = marker_path(&cfg(dir.path(), "127.0.0.1:9092", "3"));
        let b = marker_path(&cfg(dir.path(), "127.0.0.1:9093", "3"));
        let c = marker_path(&cfg(dir.path(), "127.0.0.1:9092", "4"));
        assert!(a != b && a != c && b != c);
        assert_eq!(a.parent(), Some(dir.path()), "brokers' punctuation makes no subdirectory");
    }

    #[test]
    fn a_long_broker_list_still_makes_a_short_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let many: Vec<String> = (0..40).map(|i| format!("kafka-broker-{i}.example.com:9093")).collect();
        let a = marker_path(&cfg(dir.path(), &many.join(","), "3"));
        let b = marker_path(&cfg(dir.path(), &many[1..].join(","), "3"));
        assert_ne!(a, b);
        assert!(a.file_name().unwrap().len() < 120, "{a:?}");
        leave(&a, "inc");
        assert_eq!(take(&a), Some("inc".to_string()));
    }

    #[test]
    fn a_marker_that_cannot_be_written_is_only_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        // Its directory would have to be a file: leave() must not panic.
        let path = file.join("marker.clean");
        leave(&path, "abc");
        assert_eq!(take(&path), None);
    }
}
