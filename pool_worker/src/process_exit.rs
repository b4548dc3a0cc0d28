//! How a process ends: its [`Exit`] status as a [`std::process::ExitCode`],
//! and the signals (SIGTERM, SIGINT) that stop it. The statuses themselves,
//! numbers included, are in src/exit_status.rs (no I/O, so the worker's
//! machine names them too).

pub use crate::exit_status::Exit;

/// `e` as the process's exit status. (A function, not `From`: [`Exit`] is
/// the core crate's and `ExitCode` the standard library's.)
pub fn process_code(e: Exit) -> std::process::ExitCode {
    // Every code is 0 to 255.
    std::process::ExitCode::from(e.code() as u8)
}

/// Ends the process at once with `e`'s status, from any thread, while
/// Kafka clients may still be connected.
///
/// Not `std::process::exit`: that runs the C library's exit handlers, and
/// OpenSSL's (`OPENSSL_cleanup`, registered with `atexit`) frees its state
/// while librdkafka's broker threads may still be inside it (a TLS
/// handshake, a read). A worker refused by an ACL while its clients were
/// still connecting over SASL_SSL died of a signal that way, in CI, instead
/// of exiting 2. `_exit` runs no handlers: stdout and stderr are flushed
/// here first (tracing writes straight to stderr; the account's sink is
/// unbuffered), and nothing else of the process needs an ending.
pub fn exit_now(e: Exit) -> ! {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the process without touching its memory.
    unsafe { libc::_exit(e.code()) }
}

/// SIGTERM and SIGINT, for the worker and the commands that run until asked
/// to stop (`dev`, `broker`, `supervise`); handled from the moment this is made (before, either
/// kills the process, as by default).
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn new() -> anyhow::Result<Signals> {
        use anyhow::Context as _;
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    /// The next SIGTERM or SIGINT, as the status of a process it stops.
    pub(crate) async fn recv(&mut self) -> Exit {
        tokio::select! {
            _ = self.term.recv() => Exit::Terminated,
            _ = self.int.recv() => Exit::Interrupted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_status_is_128_plus_the_signal() {
        use nix::sys::signal::Signal;
        assert_eq!(Exit::Interrupted.code(), 128 + Signal::SIGINT as i32);
        assert_eq!(Exit::Terminated.code(), 128 + Signal::SIGTERM as i32);
    }
}
