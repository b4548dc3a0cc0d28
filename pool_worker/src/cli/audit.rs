//! `pool_worker audit`: reads the claims topic from its beginning and
//! checks it with the pure [`crate::audit`] (docs/protocol.md I1–I5).

use crate::audit::{audit, Violation};
use crate::process_exit::Exit;

/// `pool_worker audit`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct AuditArgs {
    #[command(flatten)]
    pub(crate) source: crate::kafka::tools::Source,
    /// The pool's MAX_ATTEMPTS [env: MAX_ATTEMPTS]
    #[arg(long, default_value_t = crate::worker::DEFAULT_MAX_ATTEMPTS)]
    pub(crate) max_attempts: u32,
}

/// `audit`'s own variable (flag over variable over default: see
/// `Command::apply_env`).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub(crate) struct AuditEnv {
    #[serde(deserialize_with = "crate::env::parse::whole")]
    pub(crate) max_attempts: Option<u32>,
}

/// Reads the claims topic from its beginning and prints the report; exit
/// status 0 when every invariant holds, 1 otherwise.
pub(crate) async fn run(args: AuditArgs) -> anyhow::Result<Exit> {
    let src = args.source.clone();
    let log = crate::cli::blocking(move || crate::kafka::tools::read_all(&src)).await?;
    let report = audit(
        log.iter().map(|(pos, r)| (*pos, r.as_ref().ok())),
        args.max_attempts,
    );
    let offending = |v: &Violation| v.pos.and_then(|p| log.iter().find(|(q, _)| *q == p));
    if args.source.json {
        let violations: Vec<serde_json::Value> = report
            .violations
            .iter()
            .map(|v| {
                let rec = offending(v).and_then(|(_, r)| r.as_ref().ok()).map(|r| serde_json::to_value(r).unwrap_or_default());
                serde_json::json!({ "rule": v.rule, "pos": v.pos, "order": v.order, "detail": v.detail, "record": rec })
            })
            .collect();
        let mut out = serde_json::to_value(&report)?;
        out["violations"] = violations.into();
        out["holds"] = report.holds().into();
        println!("{out}");
    } else {
        println!(
            "audited {} records of '{}': {} orders, {} foreign, {} void; completed: {}",
            report.records,
            args.source.coordination_topic,
            report.orders,
            report.foreign,
            report.void,
            if report.completed.is_empty() {
                "none".to_string()
            } else {
                report
                    .completed
                    .iter()
                    .map(|(s, n)| format!("{s} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        if let Some(erased) = report.erased.sentence() {
            println!("{erased}; unclaimed orders are not judged");
        } else if !report.whole {
            println!("the log does not start at 0: unclaimed orders are not judged");
        }
        for v in &report.unjudged {
            println!(
                "not judged {}: {} at {}: {} (compaction may have erased the record that explains it)",
                v.order.as_deref().unwrap_or("-"),
                v.rule.describe(),
                v.pos.map_or("-".into(), |p| p.to_string()),
                v.detail
            );
        }
        for v in &report.violations {
            println!(
                "VIOLATION {}: {} at {}: {}",
                v.order.as_deref().unwrap_or("-"),
                v.rule.describe(),
                v.pos.map_or("-".into(), |p| p.to_string()),
                v.detail
            );
            if let Some((_, Ok(r))) = offending(v) {
                println!(
                    "  {} {}",
                    r.key(),
                    crate::cli::show::escape_controls(&String::from_utf8_lossy(&r.encode()), false)
                );
            }
        }
        if report.holds() {
            println!("every invariant holds");
        }
    }
    Ok(if report.holds() {
        Exit::Ok
    } else {
        Exit::Failure
    })
}
