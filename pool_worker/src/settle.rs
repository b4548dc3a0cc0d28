//! Settling (docs/protocol.md R16–R19): a process appends its `booted` only
//! once every append of its predecessor has landed or been lost. It waits
//! `SETTLE_MS`, unless a clean-exit marker on this host, confirmed by the
//! log, says nothing is in flight (`Worker::start_after`, `Phase::Settle`).
//! Why: docs/protocol-proofs.md, "Settling"; the counter-examples:
//! docs/protocol-history.md, "Settling".
//!
//! The marker is an optimisation, never trusted alone: a missing,
//! unreadable or stale one (the instance ran elsewhere since) only costs
//! the wait. Its name holds the brokers, the claims topic and the instance
//! number, so pools that share a host do not mix their markers.

use crate::config::Config;
use crate::env::ConfigError;
use nix::fcntl::OFlag;
use std::path::{Path, PathBuf};

/// Where this instance's clean-exit marker lives.
pub fn marker_path(cfg: &Config) -> PathBuf {
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut name = format!(
        "{}-{}-{}.clean",
        safe(&cfg.brokers),
        safe(&cfg.coordination_topic),
        cfg.instance
    );
    if name.len() > 200 {
        // A long broker list or topic name: file names stop at 255 bytes.
        let pool = format!("{}\n{}", cfg.brokers, cfg.coordination_topic);
        name = format!(
            "{:016x}-{}.clean",
            stable_hash(pool.as_bytes()),
            cfg.instance
        );
    }
    cfg.state_dir.join(name)
}

/// Where a settling process keeps the deadline it waits for
/// (docs/protocol.md R17): beside the marker. A process stopped while it
/// settles (it appended nothing) leaves it for its successor, which waits
/// for that deadline instead of starting the wait over.
pub fn deadline_path(marker: &Path) -> PathBuf {
    marker.with_extension("settle")
}

/// A hash that is the same in every process (unlike std's `RandomState`):
/// the first 64 bits of SHA-256 (`sha2`, which signs the claims records).
fn stable_hash(bytes: &[u8]) -> u64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// Markers are a few dozen bytes; anything longer is not one.
pub(crate) const MAX_MARKER_BYTES: u64 = 256;

/// Checks, and creates if missing, the directory of the clean-exit markers
/// (`STATE_DIR`). A marker lets the next process boot without waiting out
/// its predecessor's appends, so whoever can write one can make a process
/// boot while a dead one's appends may still land (docs/protocol.md R19):
/// the directory must be this user's alone. Created 0700;
/// refused (a configuration error, exit 2) if it is a symbolic link, not a
/// directory, someone else's, or writable by group or others.
pub fn prepare_dir(dir: &Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let name = dir.display();
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        return Err(ConfigError(format!("STATE_DIR: cannot create {name}: {e}")));
    }
    let md = std::fs::symlink_metadata(dir)
        .map_err(|e| ConfigError(format!("STATE_DIR: cannot read {name}: {e}")))?;
    if md.file_type().is_symlink() {
        return Err(ConfigError(format!(
            "STATE_DIR: {name} is a symbolic link; give the directory itself"
        )));
    }
    if !md.is_dir() {
        return Err(ConfigError(format!("STATE_DIR: {name} is not a directory")));
    }
    let me = nix::unistd::geteuid().as_raw();
    if md.uid() != me {
        return Err(ConfigError(format!(
            "STATE_DIR: {name} belongs to uid {}, not to this worker's user (uid {me}); give the worker a directory of its own",
            md.uid()
        )));
    }
    if md.mode() & 0o022 != 0 {
        return Err(ConfigError(format!(
            "STATE_DIR: {name} is writable by group or others (mode {:o}); `chmod 700` it",
            md.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Reads and removes the marker: the incarnation it names, if any. Any
/// problem (none there, unreadable, not removable) counts as "no marker".
/// Only a small regular file of this user counts: the path is opened
/// without following a symbolic link and without blocking (a FIFO planted
/// there must not hang the worker), and whatever else is there is removed
/// and ignored.
pub(crate) fn take(path: &Path) -> Option<String> {
    let text = String::from_utf8(take_whole(path, MAX_MARKER_BYTES)?).ok()?;
    let inc = text.trim();
    (!inc.is_empty() && inc.len() <= 200).then(|| inc.to_string())
}

/// Reads and removes the file at `path`: its bytes if it is a regular file
/// of this user of at most `max` bytes, opened without following a
/// symbolic link and without blocking; whatever else is there is removed
/// and ignored.
fn take_whole(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path);
    let bytes = match file {
        Ok(mut f) => {
            let md = f.metadata().ok()?;
            let mine = md.uid() == nix::unistd::geteuid().as_raw();
            let mut bytes = Vec::new();
            let ok = md.file_type().is_file()
                && mine
                && md.len() <= max
                && (&mut f).take(max + 1).read_to_end(&mut bytes).is_ok()
                && bytes.len() as u64 <= max;
            ok.then_some(bytes)
        }
        // A symbolic link (ELOOP) or anything that cannot be opened.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(_) => None,
    };
    // Not removed: the next process would trust it again, so ignore it.
    // (A symbolic link is removed, not its target.)
    std::fs::remove_file(path).ok()?;
    bytes
}

/// Leaves the marker for `incarnation` ([`write_whole`]). Called only
/// after every append was acknowledged. A failure is logged and costs the
/// next process the wait, nothing else.
pub fn leave(path: &Path, incarnation: &str) {
    if let Err(e) = write_whole(path, incarnation.as_bytes()) {
        tracing::warn!(path = %path.display(), error = %e, "cannot leave the clean-exit marker; the next process will wait SETTLE_MS before booting");
    }
}

/// Where a process that handed its heir a `booted` leaves that heir its
/// View (docs/protocol.md R16, "Handed view"): beside the marker.
pub fn view_path(marker: &Path) -> PathBuf {
    marker.with_extension("view")
}

/// A handed view is a checkpoint's snapshot and a little more: a
/// checkpoint's ids stop at 512 KiB; anything over this is not one.
pub(crate) const MAX_VIEW_BYTES: u64 = 4 << 20;

/// Leaves `view` for the heir it names ([`write_whole`]). A failure is
/// logged and costs the heir a replay from the newest checkpoint, nothing
/// else.
pub fn leave_view(path: &Path, view: &crate::checkpoint::HandedView) {
    let r = serde_json::to_vec(view)
        .map_err(std::io::Error::other)
        .and_then(|bytes| write_whole(path, &bytes));
    if let Err(e) = r {
        tracing::warn!(path = %path.display(), error = %e, "cannot leave the next process its view; it will replay the claims topic from the newest checkpoint");
    }
}

/// Reads and removes a handed view ([`take_whole`]); `None` when there is
/// none or it does not parse (the heir then replays as any process).
pub(crate) fn take_view(path: &Path) -> Option<crate::checkpoint::HandedView> {
    let bytes = take_whole(path, MAX_VIEW_BYTES)?;
    serde_json::from_slice(&bytes)
        .inspect_err(|e| tracing::warn!(path = %path.display(), error = %e, "a handed view that does not parse: ignored"))
        .ok()
}

/// Writes `bytes` whole to a new file (never through a symbolic link or
/// into an existing file), mode 0600, then renames it into place. The new
/// file is named after `path` and this process (`<path>.tmp<pid>`), so
/// that the marker and the view never share one.
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(OFlag::O_NOFOLLOW.bits())
            .open(&tmp)
    };
    let mut f = match create() {
        // Left by a process of the same pid that died writing it (or
        // planted): removed (a link, not its target), then made anew.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(&tmp)?;
            create()?
        }
        r => r?,
    };
    f.write_all(bytes)?;
    drop(f);
    // rename() replaces a link at `path`, never writes through it.
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
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
        assert_eq!(
            take(&path),
            None,
            "taking removes it: a process that dies next leaves none"
        );
    }

    /// R16, "Handed view": a view left for the heir is read back whole,
    /// once; a file that is not one (unparsable, too large, a link) is
    /// ignored and removed.
    #[test]
    fn a_handed_view_is_taken_once_and_only_a_real_one() {
        use crate::checkpoint::HandedView;
        use crate::record::{Incarnation, Position};
        let dir = tempfile::tempdir().unwrap();
        let path = view_path(&marker_path(&cfg(dir.path(), "127.0.0.1:9092", "3")));
        assert_ne!(path, marker_path(&cfg(dir.path(), "127.0.0.1:9092", "3")));
        let view = HandedView {
            heir: Incarnation::new("00112233aabbccdd"),
            checkpoint: Position::new(250),
            snapshot: crate::boot::View::default().snapshot(),
        };
        assert_eq!(take_view(&path), None, "none yet");
        leave_view(&path, &view);
        assert_eq!(take_view(&path), Some(view.clone()));
        assert_eq!(take_view(&path), None, "taken once");
        std::fs::write(&path, b"{\"heir\": 1}").unwrap();
        assert_eq!(take_view(&path), None, "not a view");
        assert!(!path.exists(), "removed");
        std::fs::write(&path, vec![b' '; MAX_VIEW_BYTES as usize + 1]).unwrap();
        assert_eq!(take_view(&path), None, "too large");
        let elsewhere = dir.path().join("elsewhere");
        leave_view(&elsewhere, &view);
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(take_view(&path), None, "a link is not followed");
        assert!(elsewhere.exists(), "its target is left alone");
    }

    #[test]
    fn pools_and_instances_do_not_share_markers() {
        let dir = tempfile::tempdir().unwrap();
        let a = marker_path(&cfg(dir.path(), "127.0.0.1:9092", "3"));
        let b = marker_path(&cfg(dir.path(), "127.0.0.1:9093", "3"));
        let c = marker_path(&cfg(dir.path(), "127.0.0.1:9092", "4"));
        assert!(a != b && a != c && b != c);
        assert_eq!(
            a.parent(),
            Some(dir.path()),
            "brokers' punctuation makes no subdirectory"
        );
    }

    #[test]
    fn a_long_broker_list_still_makes_a_short_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let many: Vec<String> = (0..40)
            .map(|i| format!("kafka-broker-{i}.example.com:9093"))
            .collect();
        let a = marker_path(&cfg(dir.path(), &many.join(","), "3"));
        let b = marker_path(&cfg(dir.path(), &many[1..].join(","), "3"));
        assert_ne!(a, b);
        assert!(a.file_name().unwrap().len() < 120, "{a:?}");
        // The same name in every process and every version: SHA-256("abc")
        // begins ba7816bf8f01cfea.
        assert_eq!(stable_hash(b"abc"), 0xba78_16bf_8f01_cfea);
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

    /// A FIFO planted where the marker goes: reading it used to block the
    /// worker forever (nobody writes it); now it is no marker.
    #[test]
    fn a_fifo_at_the_marker_does_not_hang_the_worker() {
        let dir = tempfile::tempdir().unwrap();
        let path = marker_path(&cfg(dir.path(), "127.0.0.1:9092", "3"));
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || tx.send(take(&p)));
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        if got.is_err() {
            // Unblock the stuck reader so that the test process can end.
            let _ = std::fs::OpenOptions::new().write(true).open(&path);
        }
        assert_eq!(
            got,
            Ok(None),
            "take() must neither block on a FIFO nor trust it"
        );
        assert!(
            std::fs::symlink_metadata(&path).is_err(),
            "the FIFO is removed"
        );
        leave(&path, "inc-1");
        assert_eq!(
            take(&path),
            Some("inc-1".to_string()),
            "markers work again after it"
        );
    }

    #[test]
    fn a_symbolic_link_is_neither_read_nor_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let path = marker_path(&cfg(dir.path(), "127.0.0.1:9092", "3"));
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "valid-7").unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        assert_eq!(
            take(&path),
            None,
            "a link is not a marker, even to a file that looks like one"
        );
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "valid-7",
            "its target is left alone"
        );
        // Writing: a link at the marker and at the temporary file.
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        leave(&path, "mine-1");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "valid-7",
            "not written through a link"
        );
        assert!(
            std::fs::symlink_metadata(&path)
                .unwrap()
                .file_type()
                .is_file(),
            "the link was replaced"
        );
        assert_eq!(take(&path), Some("mine-1".to_string()));
    }

    #[test]
    fn only_a_small_regular_file_is_a_marker() {
        let dir = tempfile::tempdir().unwrap();
        let path = marker_path(&cfg(dir.path(), "127.0.0.1:9092", "3"));
        std::fs::write(&path, "x".repeat(1 << 20)).unwrap();
        assert_eq!(take(&path), None, "a large file");
        std::fs::create_dir(&path).unwrap();
        assert_eq!(take(&path), None, "a directory");
    }

    #[test]
    fn the_state_directory_is_created_private_and_checked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("a/b");
        prepare_dir(&state).unwrap();
        assert_eq!(
            std::fs::metadata(&state).unwrap().permissions().mode() & 0o777,
            0o700
        );
        prepare_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare_dir(&state).unwrap_err().0;
        assert!(
            e.starts_with("STATE_DIR:") && e.contains("writable by group or others"),
            "{e}"
        );
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(prepare_dir(&state).is_err(), "group-writable");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare_dir(&state).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&state, &link).unwrap();
        assert!(prepare_dir(&link).unwrap_err().0.contains("symbolic link"));
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(prepare_dir(&file).is_err());
    }

    /// Someone else's directory (root's, seen by a non-root user; or the
    /// other way round) is refused.
    #[test]
    fn someone_elses_state_directory_is_refused() {
        let other = if nix::unistd::geteuid().is_root() {
            let dir = tempfile::tempdir().unwrap();
            let d = dir.path().join("other");
            std::fs::create_dir(&d).unwrap();
            // As root, chown to nobody.
            std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
            let e = prepare_dir(&d).unwrap_err().0;
            assert!(e.contains("belongs to uid 65534"), "{e}");
            return;
        } else {
            std::path::PathBuf::from("/")
        };
        let e = prepare_dir(&other).unwrap_err().0;
        assert!(e.contains("belongs to uid 0"), "{e}");
    }
}
