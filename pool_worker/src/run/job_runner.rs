//! The job runner of worker mode: the claimed order's way from its Kafka
//! message to its outcome. The order is fetched and parsed on a task of its
//! own (the loop goes on renewing the lease and reading the log meanwhile),
//! then run with [`crate::job`] on another; each reports to the loop on a
//! channel. Also the jobs' base context, built once per process.

use crate::config::Config;
use crate::job::{self, JobContext};
use crate::kafka::Kafka;
use crate::orders;
use crate::record::{OrderId, Outcome, Status};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub(super) fn log_order(me: u32, order: OrderId, attempt: u32, spec: &orders::OrderSpec) {
    let retry_of = spec.retry_of.map(|o| o.to_string());
    if spec.traceparent.is_some() || retry_of.is_some() {
        tracing::info!(
            instance = me,
            %order,
            attempt,
            traceparent = spec.traceparent.as_deref(),
            retry_of = retry_of.as_deref(),
            "order: {}",
            spec.describe()
        );
    }
}

/// A fetched order: its number, attempt and spec (or the outcome that ends it).
pub(super) type Prepared = (OrderId, u32, Result<orders::OrderSpec, Outcome>);

/// An order's way from its payload to its outcome: fetched and parsed on a
/// task of its own (the loop goes on renewing the lease and reading the log
/// meanwhile), then run as a job on another; each reports on a channel.
pub(super) struct Job {
    peek_tx: mpsc::Sender<(OrderId, Option<String>)>,
    /// The key of an order read before its claim ([`Job::peek`]).
    pub(super) peek_rx: mpsc::Receiver<(OrderId, Option<String>)>,
    /// The read under way: a fetch for a run ends it (both would use the
    /// orders consumer).
    peek_task: Option<JoinHandle<()>>,
    prep_tx: mpsc::Sender<Prepared>,
    pub(super) prep_rx: mpsc::Receiver<Prepared>,
    pub(super) prep_task: Option<JoinHandle<()>>,
    /// An order with terms, parsed, waiting for [`Action::Start`] (or
    /// [`Action::Release`]: parked).
    pub(super) prepared: Option<(orders::OrderSpec, JobContext)>,
    /// The order being fetched was cancelled (Action::Kill): its job is not
    /// started when the fetch ends.
    pub(super) killed: bool,
    out_tx: mpsc::Sender<Outcome>,
    pub(super) out_rx: mpsc::Receiver<Outcome>,
    /// Kills the running job.
    cancel: Option<watch::Sender<bool>>,
    task: Option<JoinHandle<()>>,
}

impl Job {
    pub(super) fn new() -> Job {
        let (prep_tx, prep_rx) = mpsc::channel(1);
        let (out_tx, out_rx) = mpsc::channel(1);
        let (peek_tx, peek_rx) = mpsc::channel(1);
        Job {
            peek_tx,
            peek_rx,
            peek_task: None,
            prep_tx,
            prep_rx,
            prep_task: None,
            prepared: None,
            killed: false,
            out_tx,
            out_rx,
            cancel: None,
            task: None,
        }
    }

    /// `Action::Peek`: reads the order on a task, before its claim; its
    /// key (none if it has none or cannot be read or parsed) arrives on
    /// `peek_rx`. The message is kept for the fetch of its run, if the
    /// claim wins.
    pub(super) fn peek(&mut self, kafka: &'static Kafka, order: OrderId) {
        let tx = self.peek_tx.clone();
        self.peek_task = Some(tokio::spawn(async move {
            let key = match kafka.fetch_order(order).await {
                Ok(m) => {
                    let key = orders::parse(m.payload.as_deref()).ok().and_then(|s| s.key);
                    kafka.keep_order(order, m);
                    key
                }
                Err(_) => None,
            };
            let _ = tx.send((order, key)).await;
        }));
    }

    /// Fetches and parses the order on a task; the result arrives on `prep_rx`.
    pub(super) fn fetch(
        &mut self,
        kafka: &'static Kafka,
        order: OrderId,
        attempt: u32,
        allowed_urls: Option<Vec<crate::policy::UrlRule>>,
        timeout: Duration,
    ) {
        self.killed = false;
        if let Some(t) = self.peek_task.take() {
            t.abort();
        }
        let tx = self.prep_tx.clone();
        self.prep_task = Some(tokio::spawn(async move {
            let msg = kafka
                .fetch_order(order)
                .await
                .map_err(|e| unreadable(order, e));
            let header = msg.as_ref().ok().and_then(|m| header_traceparent(order, m));
            let spec = prepare(msg.map(|m| m.payload), &allowed_urls, timeout).await;
            let spec = trace(spec, header);
            let _ = tx.send((order, attempt, spec)).await;
        }));
    }

    /// [`Action::Kill`]: kills the running job (its end comes on `out_rx`,
    /// as usual), or makes the fetch under way end it.
    pub(super) fn kill(&mut self) {
        if let Some(c) = &self.cancel {
            let _ = c.send(true);
        } else if self.prep_task.is_some() {
            self.killed = true;
        }
    }

    /// [`Action::Start`]: runs the order waiting for it.
    pub(super) fn start_prepared(&mut self) {
        if let Some((spec, ctx)) = self.prepared.take() {
            self.start(spec, ctx);
        }
    }

    /// Runs a prepared order in a task; its outcome arrives on `out_rx`.
    pub(super) fn start(&mut self, spec: orders::OrderSpec, ctx: JobContext) {
        let (tx, rx) = watch::channel(false);
        let out = self.out_tx.clone();
        self.cancel = Some(tx);
        self.task = Some(tokio::spawn(async move {
            // Every record fits by construction: the tails are cut to
            // OUTPUT_LIMIT_BYTES as written in the record (JSON escaping included).
            let mut outcome = job::run(&spec, &ctx, rx).await.fit(ctx.output_limit);
            outcome.traceparent = spec.traceparent.clone();
            outcome.retry_of = spec.retry_of.map(|o| o.to_string());
            let _ = out.send(outcome).await;
        }));
    }

    /// Whether a job runs (started, its outcome not arrived yet).
    pub(super) fn running(&self) -> bool {
        self.task.is_some()
    }

    /// The job's outcome arrived.
    pub(super) fn ended(&mut self) {
        self.task = None;
        self.cancel = None;
    }

    /// Stops the fetch and the job under way (waiting up to 15 s for the job).
    pub(super) async fn stop(&mut self) {
        if let Some(t) = self.prep_task.take() {
            t.abort();
        }
        if let Some(c) = self.cancel.take() {
            let _ = c.send(true);
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(15), t).await;
        }
    }
}

/// The part of every job's context that comes from the configuration,
/// resolved once: `ALLOWED_COMMANDS` names become absolute paths through
/// this process's `PATH` (docs/deploy.md, "Security"). Logs what the lists
/// grant that an operator may not expect.
pub(super) fn job_base(cfg: &Config) -> anyhow::Result<JobContext> {
    let mut ctx = JobContext::new(OrderId::new(0, 0), cfg.instance, 1);
    ctx.default_timeout = cfg.job_timeout;
    ctx.output_limit = cfg.output_limit;
    ctx.env_deny = cfg.env_deny.clone();
    ctx.env_allow = cfg.jobs.env_allow.clone();
    ctx.allowed_images = cfg.jobs.allowed_images.clone();
    ctx.user = cfg.jobs.user.clone().map(std::sync::Arc::new);
    ctx.limits = cfg.jobs.limits;
    ctx.end_descendants = true;
    match &cfg.allowed_commands {
        // Said once per start after an unclean exit: see [`warn_open_commands`].
        None => {}
        Some(list) => {
            let path = std::env::var_os("PATH");
            let commands = crate::policy::Commands::resolve(list, path.as_deref())?;
            for name in &commands.missing {
                tracing::warn!(program = %name, "an allowed command is not in this worker's PATH: orders naming it are refused");
            }
            for (name, found) in &commands.names {
                tracing::info!(program = %name, path = %found.display(), "allowed command");
                if crate::policy::RUNS_ANYTHING.contains(&name.as_str()) {
                    tracing::warn!(program = %name, "an allowed command runs any other program or code: allowing it allows everything (docs/deploy.md, \"Security\")");
                }
            }
            if cfg.jobs.env_allow.is_none() {
                tracing::warn!("ORDER_ENV_ALLOW is not set: orders may set any environment variable outside the fixed list of refused ones");
            }
            ctx.commands = Some(std::sync::Arc::new(commands));
        }
    }
    if let Some(images) = &cfg.jobs.allowed_images {
        match crate::policy::find_in_path("docker", std::env::var_os("PATH").as_deref()) {
            Some(docker) => ctx.docker_program = docker.display().to_string(),
            None => tracing::warn!(
                ?images,
                "ALLOWED_IMAGES is set but docker is not in this worker's PATH"
            ),
        }
    }
    if let Some(u) = &ctx.user {
        tracing::info!(user = %u.name, uid = u.uid, gid = u.gid, "jobs run as another user");
    }
    Ok(ctx)
}

/// `topic`: the Kafka name of the order's topic (`ORDER_TOPIC`).
pub(super) fn job_context(
    base: &JobContext,
    order: OrderId,
    topic: &str,
    attempt: u32,
) -> JobContext {
    JobContext {
        order,
        order_topic: topic.to_string(),
        attempt,
        ..base.clone()
    }
}

/// The time limit of a URL order's fetch: well below the lease, since the
/// worker fetches before it can renew (a third of it, at most 30 s).
pub(super) fn fetch_timeout(lease_ms: u64) -> Duration {
    Duration::from_millis((lease_ms / 3).clamp(100, 30_000))
}

/// The outcome of an order whose payload could not be read: `deleted` at
/// once if the broker deleted it, else `error`.
fn unreadable(order: OrderId, why: crate::kafka::Unreadable) -> Outcome {
    match why {
        crate::kafka::Unreadable::Deleted { log_start } => Outcome::not_run(
            Status::Deleted,
            format!(
                "order {order} was deleted by the broker before it ran (retention or DeleteRecords): \
                 offset {} is below the partition's log start {log_start}",
                order.offset
            ),
        ),
        crate::kafka::Unreadable::Failed(why) => Outcome::not_run(Status::Error, why),
    }
}

/// The `traceparent` header of an order's message, if it is a valid W3C
/// trace context; an invalid one is ignored with a warning (a header is
/// often set by a producer's instrumentation, not by the order's author:
/// it does not fail the order, unlike a bad `traceparent` field).
fn header_traceparent(order: OrderId, m: &crate::kafka::OrderMessage) -> Option<String> {
    let t = m.traceparent.as_deref()?.trim();
    match orders::check_traceparent(t) {
        Ok(()) => Some(t.to_string()),
        Err(why) => {
            // Debug formatting escapes the header's control characters.
            tracing::warn!(%order, why = ?why, "ignoring the order's traceparent header");
            None
        }
    }
}

/// The order's trace context: its own `traceparent` field, else its
/// record's header. An order that is completed without running (malformed,
/// refused...) keeps the header's in its completion.
#[allow(clippy::result_large_err)] // the Err is the order's completion, made once per order: boxing buys nothing
fn trace(
    spec: Result<orders::OrderSpec, Outcome>,
    header: Option<String>,
) -> Result<orders::OrderSpec, Outcome> {
    match spec {
        Ok(mut s) => {
            s.traceparent = s.traceparent.or(header);
            Ok(s)
        }
        Err(mut o) => {
            o.traceparent = header;
            Err(o)
        }
    }
}

/// Parses an order's payload (fetching a URL order's body). Whatever is
/// wrong with it is the order's outcome, so a bad order is completed, never
/// retried forever.
async fn prepare(
    payload: Result<Option<Vec<u8>>, Outcome>,
    allowed_urls: &Option<Vec<crate::policy::UrlRule>>,
    timeout: Duration,
) -> Result<orders::OrderSpec, Outcome> {
    let payload = payload?;
    let spec = orders::parse(payload.as_deref())
        .map_err(|e| Outcome::not_run(Status::Error, e.to_string()))?;
    let orders::OrderKind::Url { url } = &spec.kind else {
        return Ok(spec);
    };
    // Unset, URL orders are off: an order could otherwise make the worker
    // fetch from any service it can reach (an internal one included).
    let Some(_) = allowed_urls else {
        return Err(Outcome::not_run(
            Status::Refused,
            "URL orders are off (ALLOWED_URLS is not set)",
        ));
    };
    match crate::fetch::fetch_body(url, orders::MAX_ORDER_BYTES, timeout, allowed_urls).await {
        Ok(body) => orders::parse_url_body(&body)
            .map(|mut b| {
                // The pointer's trace context and link, unless the body has its own.
                b.traceparent = b.traceparent.or(spec.traceparent.clone());
                b.retry_of = b.retry_of.or(spec.retry_of);
                b
            })
            .map_err(|e| Outcome::not_run(Status::Error, format!("order fetched from {url}: {e}"))),
        Err(crate::fetch::FetchError::Refused(why)) => {
            Err(Outcome::not_run(Status::Refused, why.to_string()))
        }
        Err(crate::fetch::FetchError::Failed(why)) => Err(Outcome::not_run(Status::Error, why)),
    }
}
