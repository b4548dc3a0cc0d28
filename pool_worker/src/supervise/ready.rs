//! "Booted": a supervised process tells its supervisor that it is ready to
//! claim (its own `booted` read back and the claims topic read to its end,
//! docs/protocol.md R20), so that the supervisor starts the instance's next
//! standby then and not while the process fences and boots.
//!
//! Started at once, the standby's own start (exec, clients, connections,
//! replay: about 10 ms of CPU) ran beside the new process's fence and
//! `booted`, on the same cores as the broker that serves them, and an
//! instance's next process was ready later (bench/RESULTS.md, issue 35:
//! "exit → next booted").
//!
//! The channel is a pipe: the supervisor hands each child its write end as
//! descriptor [`FD`] and names it in [`VAR`] (as systemd's `LISTEN_FDS`
//! names descriptor 3); the worker writes the line `booted` once, and at a
//! clean exit the line `done`, then closes it ([`done`]: the supervisor then
//! lets the instance's standby go without waiting for the exit). A process
//! that never writes them (another program, or a worker that exits before
//! it boots, or fails) closes it by exiting. No library does this
//! for a child of our own: `sd_notify` is systemd's, with a socket and a
//! manager on the other side.

use std::io::Write as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::time::Duration;

/// The environment variable that names the descriptor (always [`FD`]).
pub(crate) const VAR: &str = "POOL_WORKER_READY_FD";

/// The child's descriptor for the pipe's write end.
pub(crate) const FD: i32 = 3;

/// The line a worker writes once it has booted (without its end).
const BOOTED: &[u8] = b"booted";

/// The line a worker writes once it is done with the pool (without its
/// end): every record it wrote acknowledged and read back, its job ended,
/// its clean-exit marker left; all it does after is exit.
const DONE: &[u8] = b"done";

/// What follows [`DONE`] and a space when the worker's last transaction
/// held its heir's `booted` (docs/protocol.md R16, "Handed boot"): this
/// word, a space and the heir's incarnation.
const HANDED: &str = "handed";

/// How long the supervisor waits for a child's `booted` before it starts
/// the next standby anyway (a program that is no worker, a first start that
/// settles: docs/protocol.md R17). A worker boots in tens of milliseconds;
/// a standby started late only stands by for less time.
pub(crate) const PATIENCE: Duration = Duration::from_secs(1);

/// The worker's end, taken from the environment at its start ([`take`]),
/// and what it said on it so far.
static WRITER: std::sync::Mutex<Writer> = std::sync::Mutex::new(Writer::None);

enum Writer {
    /// No pipe, or it is closed.
    None,
    /// Nothing said yet.
    Fresh(std::fs::File),
    /// `booted` said: `done` may follow.
    Booted(std::fs::File),
}

/// The worker's side, at its start, while it has one thread (it changes the
/// environment): takes the descriptor [`VAR`] names if it is the pipe the
/// supervisor gave, closes it on exec (no job inherits it) and removes
/// [`VAR`] from the environment. Anything else there (no such descriptor,
/// not a pipe, another number) is left alone: a worker started by hand has
/// none.
///
/// # Safety
/// Only while the process has one thread: it changes the environment.
pub(crate) unsafe fn take() {
    let Some(v) = std::env::var_os(VAR) else {
        return;
    };
    // SAFETY: the caller's promise: no other thread reads the environment.
    unsafe { std::env::remove_var(VAR) };
    if v.to_str().and_then(|v| v.parse().ok()) != Some(FD) {
        return;
    }
    let Ok(stat) = nix::sys::stat::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(FD) }) else {
        return;
    };
    if stat.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return;
    }
    // SAFETY: descriptor 3 is open (fstat above) and nothing else in this
    // process owns it: the supervisor opened it for us alone.
    let file = unsafe { std::fs::File::from_raw_fd(FD) };
    let _ = nix::fcntl::fcntl(
        &file,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    *WRITER.lock().unwrap_or_else(|p| p.into_inner()) = Writer::Fresh(file);
}

/// The worker's side, once booted: says so, once. Nothing if there is no
/// pipe or the supervisor is gone.
pub(crate) fn booted() {
    let mut w = WRITER.lock().unwrap_or_else(|p| p.into_inner());
    if let Writer::Fresh(mut f) = std::mem::replace(&mut *w, Writer::None) {
        // One write, so that the word and its end arrive together.
        if f.write_all(&[BOOTED, b"\n"].concat()).is_ok() {
            *w = Writer::Booted(f);
        }
    }
}

/// The worker's side, at a clean exit ([`DONE`]): says so, if it said
/// `booted` (`done` means nothing without it), and closes the pipe, so that
/// the supervisor lets the instance's standby go now, not once this
/// process's exit has been torn down and reaped (about 1.5 ms,
/// bench/RESULTS.md). `handed`: the heir whose `booted` its last
/// transaction held (`done handed <incarnation>`). Nothing if there is no
/// pipe.
pub(crate) fn done(handed: Option<&str>) {
    let taken = std::mem::replace(
        &mut *WRITER.lock().unwrap_or_else(|p| p.into_inner()),
        Writer::None,
    );
    if let Writer::Booted(mut f) = taken {
        let line = done_line(handed);
        let _ = f.write_all(line.as_bytes());
    }
}

/// The line [`done`] writes.
fn done_line(handed: Option<&str>) -> String {
    let done = std::str::from_utf8(DONE).unwrap_or("done");
    match handed {
        Some(heir) => format!("{done} {HANDED} {heir}\n"),
        None => format!("{done}\n"),
    }
}

/// A line's meaning, if it is one of ours; `done handed X` keeps X in
/// `handed`.
fn said_of(line: &[u8], handed: &mut Option<String>) -> Option<Said> {
    if line == BOOTED {
        return Some(Said::Booted);
    }
    if line == DONE {
        *handed = None;
        return Some(Said::Done);
    }
    let rest = line.strip_prefix(DONE)?.strip_prefix(b" ")?;
    let heir = std::str::from_utf8(rest)
        .ok()?
        .strip_prefix(HANDED)?
        .strip_prefix(' ')?;
    if heir.is_empty() || heir.contains(char::is_whitespace) {
        return None;
    }
    *handed = Some(heir.to_string());
    Some(Said::Done)
}

/// The supervisor's side of one child's pipe.
pub(crate) struct Pipe {
    /// Given to the child as [`FD`] (closed here once the child is spawned).
    write: OwnedFd,
    read: OwnedFd,
}

impl Pipe {
    pub(crate) fn new() -> std::io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        Ok(Pipe { write, read })
    }

    /// The write end, for a child started by the fork server (which puts
    /// it at [`FD`]).
    pub(crate) fn write_end(&self) -> &OwnedFd {
        &self.write
    }

    /// Makes `cmd`'s child get the write end as [`FD`] (the supervisor
    /// names it in [`VAR`] with the rest of the child's environment).
    pub(crate) fn give(&self, cmd: &mut tokio::process::Command) {
        let w = self.write.as_raw_fd();
        // SAFETY: the closure runs between fork and exec and calls only
        // async-signal-safe functions (dup2, fcntl) on descriptors of the
        // child's own copy.
        unsafe {
            cmd.pre_exec(move || {
                if w == FD {
                    // dup2 onto itself would keep close-on-exec.
                    nix::fcntl::fcntl(
                        std::os::fd::BorrowedFd::borrow_raw(FD),
                        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
                    )?;
                } else if libc::dup2(w, FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Once the child is spawned (or could not be): the read end alone.
    pub(crate) fn spawned(self) -> Option<Ready> {
        drop(self.write);
        tokio::net::unix::pipe::Receiver::from_owned_fd(self.read)
            .ok()
            .map(|r| Ready(r, Vec::new(), None))
    }
}

/// The read end of a spawned child's pipe, what was read of it that is
/// not a whole line yet, and the heir its `done` named, if any.
pub(crate) struct Ready(tokio::net::unix::pipe::Receiver, Vec<u8>, Option<String>);

/// What a child said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Said {
    /// `booted`.
    Booted,
    /// `done` ([`done`]).
    Done,
    /// It closed the pipe without it (it exited, most likely).
    Closed,
    /// Nothing within [`PATIENCE`].
    Nothing,
}

impl Ready {
    /// Waits for the child's `booted`, at most `patience`.
    pub(crate) async fn booted(&mut self, patience: Duration) -> Said {
        match tokio::time::timeout(patience, self.line()).await {
            Err(_) => Said::Nothing,
            Ok(None) => Said::Closed,
            // Not ours to understand: as if nothing came.
            Ok(Some(l)) => said_of(&l, &mut self.2).unwrap_or(Said::Nothing),
        }
    }

    /// The child's next word: [`Said::Booted`] or [`Said::Done`], or
    /// [`Said::Closed`] at the end of the pipe. Other lines are skipped.
    pub(crate) async fn next(&mut self) -> Said {
        loop {
            match self.line().await {
                None => return Said::Closed,
                Some(l) => {
                    if let Some(said) = said_of(&l, &mut self.2) {
                        return said;
                    }
                }
            }
        }
    }

    /// The heir the child's `done` named (`done handed X`): its last
    /// transaction held X's `booted` (docs/protocol.md R16).
    pub(crate) fn handed(&self) -> Option<&str> {
        self.2.as_deref()
    }

    /// Whether the child said `booted` in what it has written so far (read
    /// now, without waiting): for a child that exited before the wait saw
    /// its word (tokio may learn of the exit before the pipe's readiness).
    pub(crate) fn booted_already(&mut self) -> bool {
        self.drain();
        self.whole_line().is_some_and(|l| l == BOOTED)
    }

    /// Whether the child said `done` in what it has written so far (read
    /// now, without waiting; a `done handed X` is kept, [`Ready::handed`]):
    /// for a child that exited before the wait saw its word.
    pub(crate) fn done_already(&mut self) -> bool {
        self.drain();
        while let Some(l) = self.whole_line() {
            if said_of(&l, &mut self.2) == Some(Said::Done) {
                return true;
            }
        }
        false
    }

    /// Reads what the child has written so far, without waiting.
    fn drain(&mut self) {
        use std::os::fd::AsFd as _;
        let mut buf = [0u8; 64];
        while let Ok(n @ 1..) = nix::unistd::read(self.0.as_fd(), &mut buf) {
            self.1.extend_from_slice(&buf[..n]);
        }
    }

    /// The first whole line of what was read, taken without its end.
    fn whole_line(&mut self) -> Option<Vec<u8>> {
        let n = self.1.iter().position(|&b| b == b'\n')?;
        let mut l: Vec<u8> = self.1.drain(..=n).collect();
        l.pop();
        Some(l)
    }

    /// The next line, without its end; `None` at the end of the pipe (or
    /// when it cannot be read). A line is a few bytes: one that grows past
    /// 64 is taken as it is.
    async fn line(&mut self) -> Option<Vec<u8>> {
        use tokio::io::AsyncReadExt as _;
        loop {
            if let Some(l) = self.whole_line() {
                return Some(l);
            }
            if self.1.len() > 64 {
                return Some(std::mem::take(&mut self.1));
            }
            let mut buf = [0u8; 64];
            match self.0.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.1.extend_from_slice(&buf[..n]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `done`, and `done handed X` naming the heir whose `booted` the last
    /// transaction held (docs/protocol.md R16); what `done` writes is what
    /// the supervisor reads.
    #[test]
    fn done_names_the_heir_it_handed_to() {
        let mut handed = None;
        assert_eq!(said_of(b"booted", &mut handed), Some(Said::Booted));
        assert_eq!(said_of(b"done", &mut handed), Some(Said::Done));
        assert_eq!(handed, None);
        let line = done_line(Some("0123456789abcdef"));
        let line = line.strip_suffix('\n').unwrap();
        assert_eq!(said_of(line.as_bytes(), &mut handed), Some(Said::Done));
        assert_eq!(handed.as_deref(), Some("0123456789abcdef"));
        assert_eq!(done_line(None), "done\n");
        // A plain `done` after forgets it; junk is not ours.
        assert_eq!(said_of(b"done", &mut handed), Some(Said::Done));
        assert_eq!(handed, None);
        for junk in [
            "done handed",
            "done handed ",
            "done handed a b",
            "done x",
            "doneX",
            "done handedX",
        ] {
            assert_eq!(said_of(junk.as_bytes(), &mut handed), None, "{junk:?}");
            assert_eq!(handed, None);
        }
    }
}
