//! The `pool_worker` command line: worker mode (no subcommand) and one
//! module per subcommand, as mini-redis's `src/cmd/`.
//!
//! Worker mode is configured by the environment only (see `config`), since
//! it runs under a supervisor; the subcommands are for people and scripts.

pub mod audit;
pub mod broker;
pub mod cancel;
pub mod dev;
pub mod retry;
pub mod serve;
pub mod status;
pub mod submit;
pub mod supervise;

use crate::{config::Config, exit::Exit, run};
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
    /// Send one order (`-- prog args`, --text or --json-file); --wait for its result.
    Submit(submit::SubmitArgs),
    /// Send an ended order (PARTITION:OFFSET) again, as a new order that names it (`retry_of`).
    Retry(retry::RetryArgs),
    /// Cancel an order (PARTITION:OFFSET): one not yet running never runs, a running one's job is killed; both end `cancelled`.
    Cancel(cancel::CancelArgs),
    /// Replay the claims topic from its beginning and check every invariant the model checks (exit 1 with the offending records if one breaks).
    Audit(audit::AuditArgs),
    /// A live web page of the pool, Prometheus /metrics, /healthz and /readyz (read-only; prints the bound address first).
    Serve(serve::ServeArgs),
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

/// The current time as RFC 3339 UTC (for the one log line written before
/// logging is set up).
fn humantime_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Flag over variable over default: fills the subcommand's flags that were
/// not given (`m`, its matches) from the environment, read by
/// `config::read` as the worker's settings are.
fn apply_env(
    command: &mut Command,
    m: &clap::ArgMatches,
) -> Result<(), crate::config::ConfigError> {
    match command {
        Command::Dev(a) => a.apply_env(m),
        Command::Broker(a) => a.apply_env(m),
        Command::Supervise(_) => Ok(()),
        Command::Status(a) => a.source.apply_env(m),
        Command::History(a) => a.source.apply_env(m),
        Command::Submit(a) => a.source.apply_env(m),
        Command::Retry(a) => a.source.apply_env(m),
        Command::Cancel(a) => a.source.apply_env(m),
        Command::Audit(a) => a.apply_env(m),
        Command::Serve(a) => a.apply_env(m),
    }
}

/// The binary: parses the command line and runs worker mode or a
/// subcommand.
pub fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Some(command), Some((_, m))) = (cli.command.as_mut(), matches.subcommand()) {
        if let Err(e) = apply_env(command, m) {
            eprintln!("pool_worker: {e}");
            return Exit::Config.into();
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pool_worker: cannot start the async runtime: {e}");
            return Exit::Failure.into();
        }
    };
    let result = match cli.command {
        None => {
            // The clean-exit markers' directory is checked (and made) here,
            // so that a bad one is a configuration error (exit 2).
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
                            "timestamp": humantime_now(),
                            "level": "ERROR",
                            "fields": {"message": format!("pool_worker: {e}")},
                            "target": "pool_worker",
                        });
                        eprintln!("{line}");
                    } else {
                        eprintln!("pool_worker: {e}");
                    }
                    return Exit::Config.into();
                }
            };
            init_logs(cfg.log_json);
            let result = runtime.block_on(run::run(cfg));
            // Exit at once: tearing down the runtime and the Kafka clients
            // would only delay the supervisor's restart (see run::run).
            let code = match result {
                Ok(code) => code,
                Err(e) => {
                    tracing::error!("pool_worker: {e:#}");
                    Exit::Failure
                }
            };
            std::process::exit(code.code())
        }
        Some(Command::Dev(args)) => {
            init_logs(false);
            runtime.block_on(dev::run(args)).map(i32::from)
        }
        Some(Command::Broker(args)) => {
            init_logs(false);
            runtime.block_on(broker::run(args)).map(i32::from)
        }
        Some(Command::Supervise(args)) => {
            init_logs(false);
            runtime.block_on(supervise::run(args)).map(i32::from)
        }
        Some(Command::Status(args)) => {
            init_logs(false);
            // One clear line, at once, when no broker answers (issue 19).
            args.source
                .probe()
                .and_then(|()| runtime.block_on(status::status(args)))
                .map(i32::from)
        }
        Some(Command::History(args)) => {
            init_logs(false);
            // One clear line, at once, when no broker answers (issue 19).
            args.source
                .probe()
                .and_then(|()| runtime.block_on(status::history(args)))
                .map(i32::from)
        }
        Some(Command::Submit(args)) => {
            init_logs(false);
            // One clear line, at once, when no broker answers (issue 19).
            args.source
                .probe()
                .and_then(|()| runtime.block_on(submit::run(args)))
        }
        Some(Command::Retry(args)) => {
            init_logs(false);
            args.source
                .probe()
                .and_then(|()| runtime.block_on(retry::run(args)))
        }
        Some(Command::Cancel(args)) => {
            init_logs(false);
            // One clear line, at once, when no broker answers (issue 19).
            args.source
                .probe()
                .and_then(|()| runtime.block_on(cancel::run(args)))
                .map(i32::from)
        }
        Some(Command::Audit(args)) => {
            init_logs(false);
            // One clear line, at once, when no broker answers (issue 19).
            args.source
                .probe()
                .and_then(|()| runtime.block_on(audit::run(args)))
                .map(i32::from)
        }
        Some(Command::Serve(args)) => {
            init_logs(false);
            runtime.block_on(serve::run(args)).map(i32::from)
        }
    };
    match result {
        // An Exit, or the job's own status (`submit --wait`, `retry --wait`).
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) if e.downcast_ref::<crate::config::ConfigError>().is_some() => {
            eprintln!("pool_worker: {e:#}");
            Exit::Config.into()
        }
        Err(e) => {
            eprintln!("pool_worker: {e:#}");
            Exit::Failure.into()
        }
    }
}
