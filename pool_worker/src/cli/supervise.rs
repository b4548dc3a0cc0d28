//! `pool_worker supervise`: the supervisor ([`crate::supervise`]) as a
//! command; its events on stdout, one line each (text or `--json`).

use crate::process_exit::Exit;
use crate::process_exit::Signals;
use crate::supervise::{
    ChildOutput, Instances, SupEvent, Supervisor, SupervisorConfig, DEFAULT_MAX_RESTART_DELAY,
    DEFAULT_RESTART_DELAY,
};
use std::ffi::OsString;
use std::io::{self, Write as _};
use std::path::PathBuf;
use std::time::Duration;

/// `pool_worker supervise`: run and restart instances of this program.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct SuperviseArgs {
    /// Which instances: N (1 to N), or a list of numbers and ranges like 1-4,7.
    #[arg(long)]
    pub(crate) instances: Instances,
    /// Delay before an instance that failed (exit status other than 0, or a
    /// signal) is started again; doubled for each failure in a row, up to
    /// --max-restart-delay-ms. A clean exit (0) is restarted at once.
    #[arg(long, default_value_t = DEFAULT_RESTART_DELAY.as_millis() as u64)]
    pub(crate) restart_delay_ms: u64,
    /// The longest delay after failures in a row (a crash loop restarts at
    /// this pace).
    #[arg(long, default_value_t = DEFAULT_MAX_RESTART_DELAY.as_millis() as u64)]
    pub(crate) max_restart_delay_ms: u64,
    /// Stop starting instances after this many starts in total.
    #[arg(long)]
    pub(crate) max_runs: Option<u64>,
    /// Print events as JSON lines.
    #[arg(long)]
    pub(crate) json: bool,
    /// Where the children's stdout and stderr go.
    #[arg(long, value_enum, default_value_t = ChildOutput::Prefix)]
    pub(crate) child_output: ChildOutput,
    /// When stopping: time between SIGTERM and SIGKILL.
    #[arg(long, default_value_t = 5000)]
    pub(crate) stop_grace_ms: u64,
    /// No standby processes: start an instance's next process only once the
    /// current one has exited. By default, while an instance's process
    /// runs, its next one is started, connects and reads the claims topic,
    /// and takes over the moment the current one exits (it fences and
    /// appends only then); not with `CLAIMS_FENCE=settle` or `--program`.
    #[arg(long)]
    pub(crate) no_standby: bool,
    /// Start every worker with fork and exec. By default workers are forked
    /// from a fork server, a copy of this executable started once that
    /// never runs a worker itself: a worker is still a new process per
    /// order, without the exec's cost (bench/RESULTS.md, issue 35). A new
    /// binary at this executable's path gets a new fork server.
    #[arg(long)]
    pub(crate) no_fork_server: bool,
    /// Run this program instead of this executable's worker mode (for tests,
    /// or to supervise something else); its arguments follow `--`.
    #[arg(long)]
    pub(crate) program: Option<PathBuf>,
    #[arg(last = true)]
    pub(crate) program_args: Vec<OsString>,
}

/// Runs `pool_worker supervise`; returns the exit status.
pub(crate) async fn run(args: SuperviseArgs) -> anyhow::Result<Exit> {
    let mut stop = Signals::new()?;

    let mut cfg = SupervisorConfig::new(args.instances.0)?;
    if let Some(program) = args.program {
        cfg.program = program;
    }
    cfg.args = args.program_args;
    cfg.restart_delay = Duration::from_millis(args.restart_delay_ms);
    cfg.max_restart_delay = Duration::from_millis(args.max_restart_delay_ms);
    cfg.max_runs = args.max_runs;
    cfg.stop_grace = Duration::from_millis(args.stop_grace_ms);
    cfg.output = args.child_output;
    cfg.standby = !args.no_standby && crate::supervise::can_stand_by(&cfg);
    cfg.fork_server = !args.no_fork_server;

    let json = args.json;
    let (mut sup, mut events) = Supervisor::spawn(cfg);
    let ending = loop {
        tokio::select! {
            Some(event) = events.recv() => print_event(&event, json),
            _ = stop.recv() => sup.stop(),
            ending = sup.wait() => break ending,
        }
    };
    while let Ok(event) = events.try_recv() {
        print_event(&event, json);
    }
    let code = match ending {
        Ok(e) => e.exit_code(),
        Err(e) => {
            eprintln!("pool_worker supervise: {e:#}");
            Exit::Failure
        }
    };
    let n = code.code();
    print_line(&if json {
        format!(r#"{{"event":"done","code":{n}}}"#)
    } else {
        format!("supervisor done (exit {n})")
    });
    Ok(code)
}

fn print_event(event: &SupEvent, json: bool) {
    print_line(&if json {
        event.json_line()
    } else {
        event.human()
    });
}

/// One line on stdout, flushed (errors ignored: a closed stdout must not
/// stop the supervision).
fn print_line(line: &str) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
