//! The `pool_worker` command line: worker mode (no subcommand) and one
//! module per subcommand, as mini-redis's `src/cmd/`.
//!
//! Worker mode is configured by the environment only (see `config`), since
//! it runs under a supervisor; the subcommands are for people and scripts.

// One module per subcommand.
mod audit; // the claims topic checked against the invariants (crate::audit)
mod broker; // the embedded broker as a process
mod cancel; // an operator cancels an order
mod dev; // the whole pool in one process
mod retry; // an ended order sent again
mod serve; // the web page and /metrics
mod status; // `status` and `history`
pub(crate) mod submit; // one order sent; `--wait` for its result
mod supervise; // keep N instances running

// What the subcommands share.
pub(crate) mod show; // text from orders and records made safe to show

use crate::kafka::tools::apply_env_with;
use crate::{config::Config, process_exit::Exit, run};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "pool_worker",
    version,
    about = "A Kafka-native worker pool that runs each work order exactly once.\n\nWithout a subcommand: run one worker (configured by the environment: KAFKA_BROKERS, ORDERS_TOPIC, COORDINATION_TOPIC, INSTANCE_NUMBER; see README.md), complete at most one order (ORDERS_PER_PROCESS orders), and exit."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The whole pool in one process: embedded broker, N instances, live audit trail.
    Dev(dev::DevArgs),
    /// Run the embedded Kafka-protocol broker (librdkafka's mock cluster).
    Broker(broker::BrokerArgs),
    /// Keep N worker instances running, restarting each when it exits.
    Supervise(supervise::SuperviseArgs),
    /// The pool's state: each instance, and counts of orders (from the claims topic).
    Status(status::StatusArgs),
    /// Every claims record about one order (PARTITION:OFFSET), in log order.
    History(status::HistoryArgs),
    /// Send one order (`-- prog args`, --text or --json-file); --at/--in: not before then, --key: its key; --wait for its result.
    Submit(submit::SubmitArgs),
    /// Send an ended order (PARTITION:OFFSET) again, as a new order that names it (`retry_of`).
    Retry(retry::RetryArgs),
    /// Cancel an order (PARTITION:OFFSET): one not yet running never runs, a running one's job is killed; both end `cancelled`.
    Cancel(cancel::CancelArgs),
    /// Replay the claims topic from its beginning and check every invariant the model checks (exit 1 with the offending records if one breaks).
    Audit(audit::AuditArgs),
    /// A live web page of the pool, Prometheus /metrics, /healthz and /readyz (prints the bound address first); read-only unless SERVE_TOKEN or SERVE_TOKEN_FILE is set.
    ///
    /// Read-only unless a token is set: SERVE_TOKEN (the token), or
    /// SERVE_TOKEN_FILE (a file holding it that only its owner may read:
    /// `chmod 600`); one of them, at least 32 bytes (`openssl rand -base64
    /// 32`). Then a person who logs in on the page by pasting the token can
    /// submit orders, and cancel or retry one from its page, as `submit`,
    /// `cancel` and `retry` do; every action is logged with its session.
    /// serve speaks plain HTTP: off loopback, put it behind a proxy that ends
    /// TLS (the session cookie is then marked Secure). See docs/deploy.md,
    /// "Acting from the page".
    Serve(serve::ServeArgs),
    // `pool_worker guard ...` (internal: a running job's guard, started by
    // the worker) is no subcommand here: `main` parses it alone, with
    // [`guard_args`], before this tree is built.
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,librdkafka=off,rdkafka=warn"));
    // Colour only on a terminal: escape codes in a file or a pipe (a
    // supervisor's prefixed output, a log collector) are noise.
    use std::io::IsTerminal as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if json {
        builder.json().init();
    } else {
        builder.with_target(false).init();
    }
}

impl Command {
    /// Flag over variable over default: fills the flags that were not
    /// given (`m`, the subcommand's matches) from the environment, read by
    /// `env::read` as the worker's settings are.
    /// Flags over variables, then the orders topics (`ORDERS_TOPIC`, R57)
    /// and the order ids typed against them: a bad list, or an order of a
    /// topic not in it, is exit 2 before anything is asked of Kafka.
    fn apply_env(&mut self, m: &clap::ArgMatches) -> Result<(), crate::env::ConfigError> {
        self.apply_vars(m)?;
        match self {
            Command::Dev(a) => drop(a.topics.orders()?),
            Command::Broker(a) => drop(a.topics.orders()?),
            Command::History(a) => a.order = a.source.listed(a.order)?,
            Command::Retry(a) => a.order = a.source.listed(a.order)?,
            Command::Cancel(a) => a.order = a.source.listed(a.order)?,
            Command::Submit(a) => a.check_topic()?,
            Command::Status(a) => drop(a.source.orders()?),
            Command::Audit(a) => drop(a.source.orders()?),
            Command::Serve(a) => drop(a.source.orders()?),
            Command::Supervise(_) => {}
        }
        Ok(())
    }

    fn apply_vars(&mut self, m: &clap::ArgMatches) -> Result<(), crate::env::ConfigError> {
        match self {
            Command::Dev(a) => a.topics.apply_env(m),
            Command::Broker(a) => a.topics.apply_env(m),
            Command::Supervise(_) => Ok(()),
            Command::Status(a) => a.source.apply_env(m),
            Command::History(a) => a.source.apply_env(m),
            Command::Submit(a) => a.source.apply_env(m),
            Command::Retry(a) => a.source.apply_env(m),
            Command::Cancel(a) => a.source.apply_env(m),
            Command::Audit(a) => {
                let var = |e: audit::AuditEnv| e.max_attempts;
                apply_env_with(&mut a.source, m, "max_attempts", &mut a.max_attempts, var)
            }
            Command::Serve(a) => {
                let var = |e: serve::ServeEnv| e.serve_listen;
                apply_env_with(&mut a.source, m, "listen", &mut a.listen, var)
            }
        }
    }

    /// The tools that read the pool's topics at once: they first make
    /// sure a broker answers, so that none does is one clear line, at
    /// once (issue 19). `serve` waits for one instead.
    fn probed_source(&self) -> Option<&crate::kafka::tools::Source> {
        match self {
            Command::Status(a) => Some(&a.source),
            Command::History(a) => Some(&a.source),
            Command::Submit(a) => Some(&a.source),
            Command::Retry(a) => Some(&a.source),
            Command::Cancel(a) => Some(&a.source),
            Command::Audit(a) => Some(&a.source),
            _ => None,
        }
    }

    /// Runs the subcommand on `runtime`; its exit status.
    fn run(self, runtime: &tokio::runtime::Runtime) -> anyhow::Result<Exit> {
        if let Some(src) = self.probed_source() {
            src.probe()?;
            runtime.block_on(src.warn_if_not_compacted());
        }
        runtime.block_on(async {
            match self {
                Command::Dev(a) => dev::run(a).await,
                Command::Broker(a) => broker::run(a).await,
                Command::Supervise(a) => supervise::run(a).await,
                Command::Status(a) => status::status(a).await,
                Command::History(a) => status::history(a).await,
                Command::Submit(a) => submit::run(a).await,
                Command::Retry(a) => retry::run(a).await,
                Command::Cancel(a) => cancel::run(a).await,
                Command::Audit(a) => audit::run(a).await,
                Command::Serve(a) => serve::run(a).await,
            }
        })
    }
}

/// The binary: parses the command line and runs worker mode or a
/// subcommand.
pub fn main() -> ExitCode {
    few_malloc_arenas();
    // The supervisor's fork server: its forked children come back here as
    // workers, set up as if this executable had been started for them.
    if std::env::var_os(crate::supervise::FORK_SERVER).is_some() {
        match crate::supervise::fork_server() {
            crate::supervise::Served::Child => {}
            crate::supervise::Served::Done(code) => return ExitCode::from(code),
        }
    }
    crate::account::init();
    // The two commands on every order's path (a worker process per order,
    // and its job's guard) skip building the whole command line's parser,
    // all subcommands' definitions (bench/RESULTS.md, "The process's own
    // start").
    let first = std::env::args_os().nth(1);
    match first.as_deref().and_then(std::ffi::OsStr::to_str) {
        None => {
            // Before any thread exists: the job's guards live in a copy of
            // this process made now (pool_worker/src/guard.rs, `Host`).
            crate::guard::fork_host();
            // SAFETY: still one thread (the host is a process of its own).
            unsafe { crate::supervise::take_ready() };
            return worker();
        }
        // A blocking loop, no runtime, no logging set-up.
        Some("guard") => {
            let args = guard_args(std::env::args_os().skip(1)).unwrap_or_else(|e| e.exit());
            let code = crate::guard::main(args);
            crate::account::mark_exit();
            return ExitCode::from(u8::try_from(code).unwrap_or(1));
        }
        Some(_) => {}
    }
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Some(command), Some((_, m))) = (cli.command.as_mut(), matches.subcommand()) {
        if let Err(e) = command.apply_env(m) {
            eprintln!("pool_worker: {e}");
            return crate::process_exit::process_code(Exit::Config);
        }
    }
    let Some(command) = cli.command else {
        return worker();
    };
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    init_logs(false);
    match command.run(&runtime) {
        Ok(code) => crate::process_exit::process_code(code),
        Err(e) => {
            eprintln!("pool_worker: {e:#}");
            match e.downcast_ref::<crate::env::ConfigError>() {
                Some(_) => crate::process_exit::process_code(Exit::Config),
                None => crate::process_exit::process_code(Exit::Failure),
            }
        }
    }
}

// `pool_worker guard ...` parsed alone: the hidden subcommand's own
// arguments, [`crate::guard::GuardArgs`].
#[derive(Parser, Debug)]
#[command(
    name = "pool_worker guard",
    bin_name = "pool_worker guard",
    about = "The guard of a running job (started by the worker; see pool_worker/src/guard.rs)."
)]
struct GuardCli {
    #[command(flatten)]
    args: crate::guard::GuardArgs,
}

/// The guard's arguments from its command line (`guard` first, in place
/// of the program's name), as `pool_worker guard` parses them.
pub(crate) fn guard_args(
    argv: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
) -> Result<crate::guard::GuardArgs, clap::Error> {
    GuardCli::try_parse_from(argv).map(|c| c.args)
}

/// glibc's malloc gives each thread that allocates an arena of its own
/// (up to 8 per core), each a heap mapped, grown and given back apart: a
/// worker's ~16 threads (librdkafka's above all) spread over as many, in a
/// process that lives for one order. Two arenas took about 1.7 ms of CPU off
/// each order (bench/RESULTS.md, "a job's process started with `vfork`").
/// Set here, before any thread exists; the fork server's workers inherit
/// it. An operator's own `MALLOC_ARENA_MAX`, or `GLIBC_TUNABLES` naming
/// `arena_max`, wins.
fn few_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if !operator_sets_arenas(
        std::env::var_os("MALLOC_ARENA_MAX").is_some(),
        std::env::var_os("GLIBC_TUNABLES").as_deref(),
    ) {
        // SAFETY: one call into glibc's malloc settings, before any thread.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS) };
    }
}

/// How many malloc arenas a process of this binary uses (see
/// [`few_malloc_arenas`]).
const MALLOC_ARENAS: libc::c_int = 2;

/// Whether the environment sets glibc's arena count itself.
fn operator_sets_arenas(arena_max: bool, tunables: Option<&std::ffi::OsStr>) -> bool {
    arena_max
        || tunables.is_some_and(|t| {
            t.to_string_lossy()
                .split(':')
                .any(|kv| kv.starts_with("glibc.malloc.arena_max="))
        })
}

/// The async runtime of every command but the worker's and the guard's.
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    build_runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
}

/// Worker mode ([`worker_mode`]) on its own async runtime: its tasks run
/// on the process's own thread, with no worker threads of tokio's. A
/// worker process lives for one order; two more threads cost it their
/// start and a hand-over at each wake-up, about 0.5 ms of CPU per order in
/// all (bench/RESULTS.md, "Issue 35: the worker's tasks on one thread").
/// Blocking librdkafka calls still go to tokio's blocking threads
/// ([`crate::cli::blocking`]), and the Kafka reader is a thread of its
/// own, so nothing the worker awaits holds this thread.
fn worker() -> ExitCode {
    match build_runtime(&mut tokio::runtime::Builder::new_current_thread()) {
        Ok(rt) => worker_mode(&rt),
        Err(code) => code,
    }
}

/// `builder`'s runtime, with its I/O and time drivers; a failure is said
/// on standard error and is the process's failure status.
fn build_runtime(
    builder: &mut tokio::runtime::Builder,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("pool_worker: cannot start the async runtime: {e}");
        crate::process_exit::process_code(Exit::Failure)
    })
}

/// Worker mode: one worker, configured by the environment; exits the
/// process with its status.
fn worker_mode(runtime: &tokio::runtime::Runtime) -> ! {
    // The clean-exit markers' directory is checked (and made) here, so that
    // a bad one is a configuration error (exit 2).
    let checked = Config::from_env().and_then(|c| {
        if c.settle_ms > 0 {
            crate::settle::prepare_dir(&c.state_dir)?;
        }
        Ok(c)
    });
    let cfg = match checked {
        Ok(c) => c,
        Err(e) => {
            // Logging is not set up yet (its format is part of the
            // configuration), so honour LOG_FORMAT=json by hand.
            if crate::config::log_json_from_env() {
                let line = serde_json::json!({
                    "timestamp": humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
                    "level": "ERROR",
                    "fields": {"message": format!("pool_worker: {e}")},
                    "target": "pool_worker",
                });
                eprintln!("{line}");
            } else {
                eprintln!("pool_worker: {e}");
            }
            crate::process_exit::exit_now(Exit::Config)
        }
    };
    init_logs(cfg.log_json);
    crate::account::mark("configured");
    // Exit at once: tearing down the runtime and the Kafka clients would
    // only delay the supervisor's restart (see run::run).
    let code = match runtime.block_on(run::run(cfg)) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("pool_worker: {e:#}");
            Exit::Failure
        }
    };
    crate::account::mark_exit();
    crate::process_exit::exit_now(code)
}

/// Runs `f` (blocking Kafka client calls) off the async threads
/// ([`crate::kafka::client_config::blocking`]), with its own error and the task's as one.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    crate::kafka::client_config::blocking(f).await?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operator's `MALLOC_ARENA_MAX`, or an `arena_max` among glibc's
    /// tunables, is left alone; other tunables are not that.
    #[test]
    fn the_operators_arena_count_wins() {
        let t = |s: &str| Some(std::ffi::OsString::from(s));
        assert!(!operator_sets_arenas(false, None));
        assert!(operator_sets_arenas(true, None));
        assert!(operator_sets_arenas(
            false,
            t("glibc.malloc.arena_max=8").as_deref()
        ));
        assert!(operator_sets_arenas(
            false,
            t("glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1").as_deref()
        ));
        assert!(!operator_sets_arenas(
            false,
            t("glibc.malloc.tcache_count=0").as_deref()
        ));
        assert!(!operator_sets_arenas(
            false,
            t("glibc.malloc.arena_test=1").as_deref()
        ));
    }
}
