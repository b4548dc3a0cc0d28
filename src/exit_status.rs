//! Every exit status of the `pool_worker` binary and its subcommands, in one
//! place. Supervisors (`supervise`, systemd units, deploy/compose.yaml),
//! scripts, the tests and docs/deploy.md rely on these numbers: never
//! renumber one.
//!
//! Two kinds of status are not ours to choose and keep the numbers their
//! convention gives them: `submit --wait` exits with the job's own exit
//! status ([`Exit::Job`]; see [`Exit::WaitTimedOut`] for its one own status
//! beside `0`, `1` and `2`), and a process stopped by a signal exits with
//! 128 + the signal's number, as a shell reports it.
//!
//! Pure names and numbers, no I/O: the worker's machine (src/worker.rs)
//! ends with one, and pool_worker/src/process_exit.rs makes a process's status of it.

/// An exit status of `pool_worker` (worker mode or a subcommand).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exit {
    /// Done: the worker completed its order (`ORDERS_PER_PROCESS` orders);
    /// a tool answered; `dev`, `supervise`, `broker` or `serve` stopped when
    /// asked.
    Ok,
    /// Any other error: brokers unreachable for two minutes at boot, an
    /// invariant broken (`audit`), no record of the order (`history`), an
    /// order not sent again (`retry`), `dev --demo`'s deadline passed, a
    /// waited-for job that ended without an exit status (`submit --wait`).
    Failure,
    /// A configuration error (a missing or malformed setting, a topic that
    /// does not exist, an invalid order to `submit`): a supervisor does not
    /// restart it in a loop.
    Config,
    /// Fenced: a newer process with the same `INSTANCE_NUMBER` started (a
    /// supervisor does not restart it).
    Fenced,
    /// Revoked: this process was cut off longer than its lease and another
    /// instance took its order over (restart it).
    Revoked,
    /// `submit --wait`: the order was not completed within the wait (the
    /// `timeout` command's convention).
    WaitTimedOut,
    /// Stopped by SIGINT (128 + 2).
    Interrupted,
    /// Stopped by SIGTERM (128 + 15).
    Terminated,
    /// `submit --wait`, `retry --wait`: the waited-for job's own exit
    /// status, whatever it is (not one of ours: never in [`Exit::ALL`]).
    Job(u8),
}

impl Exit {
    /// Every status, for [`Exit::from_code`] and the tests.
    pub const ALL: [Exit; 8] = [
        Exit::Ok,
        Exit::Failure,
        Exit::Config,
        Exit::Fenced,
        Exit::Revoked,
        Exit::WaitTimedOut,
        Exit::Interrupted,
        Exit::Terminated,
    ];

    /// The number, as a process exit status.
    pub const fn code(self) -> i32 {
        match self {
            Exit::Ok => 0,
            Exit::Failure => 1,
            Exit::Config => 2,
            Exit::Fenced => 3,
            Exit::Revoked => 4,
            Exit::WaitTimedOut => 124,
            Exit::Interrupted => 130,
            Exit::Terminated => 143,
            Exit::Job(code) => code as i32,
        }
    }

    /// The status with this number, if it is one of ours (a child's exit
    /// status, as `supervise` sees it).
    pub fn from_code(code: i32) -> Option<Exit> {
        Exit::ALL.into_iter().find(|e| e.code() == code)
    }
}

impl From<Exit> for i32 {
    fn from(e: Exit) -> i32 {
        e.code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_numbers_stay_what_supervisors_and_docs_expect() {
        let codes: Vec<i32> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 124, 130, 143]);
        for e in Exit::ALL {
            assert_eq!(Exit::from_code(e.code()), Some(e));
        }
        assert_eq!(Exit::from_code(5), None);
        assert_eq!(Exit::from_code(-1), None);
        assert_eq!(Exit::Job(7).code(), 7);
        assert_eq!(Exit::from_code(Exit::Job(5).code()), None);
    }
}
