//! Running one work order: a process group, bounded output, a time limit.
//!
//! [`run`] turns a validated [`OrderSpec`] into an [`Outcome`]. It never
//! fails and never panics: a program that cannot be started is an `error`
//! outcome, one the allow list forbids is `refused`, and whatever the job does
//! (exit, crash, hang, print gigabytes, fork daemons) ends as a bounded
//! record that fits in a `completed` message.
//!
//! The design follows from three facts about running untrusted commands:
//!
//! * **A job is a process group, not a process.** `sh -c 'a & b'` starts
//!   processes that outlive `sh`. Every job gets its own group
//!   (`process_group(0)`, so its id is the main process's pid) and the whole
//!   group is sent `SIGKILL` on timeout, on cancellation, and when the job
//!   ends: nothing a job starts survives the order, so an order that is run
//!   again elsewhere after a takeover cannot race its own leftovers. (A
//!   process that calls `setsid` leaves the group; only a container or cgroup
//!   can hold such a job, which is what `image` orders are for.)
//!
//!   If the worker itself is killed (SIGKILL), the job's main process gets
//!   SIGKILL too (`PR_SET_PDEATHSIG`); its own children outlive it unless
//!   they die with it (a shell's pipeline does), which is one more reason
//!   for `image` orders.
//!
//! * **Output is unbounded, memory is not.** stdout and stderr are read
//!   concurrently (reading one while the job blocks writing the other would
//!   deadlock) into [`Tail`] buffers that keep only the last `output_limit`
//!   bytes: the end of the output is where the error usually is.
//!
//! * **Exit is not the end.** The main process may exit while a background
//!   child still holds the pipes open. After the exit the tails are read for
//!   at most [`EXIT_GRACE`], then the group is killed and reading stops.
//!
//! The job's environment is the worker's, minus the operator's deny list
//! (so that, for example, the worker's Kafka credentials do not leak into
//! jobs), plus the order's `env`, plus five variables that tell the job who it
//! is (`ORDER_PARTITION`, `ORDER_OFFSET`, `INSTANCE_NUMBER`, `ORDER_ATTEMPT`,
//! `ORDER_RETRY`), set last so an order cannot forge them.
//!
//! A program name without a `/` is looked up in the *worker's* `PATH`, not the
//! job's: an order that sets `PATH` must not change which program an allowed
//! name runs.
//!
//! URL orders are fetched, not run: [`fetch_order`] is a deliberately small
//! HTTP/1.1 client (plain `http://`, bounded in size and time, behind an
//! optional prefix allow list); the caller parses the body with
//! `orders::parse_url_body` and runs the result.

use crate::orders::{OrderKind, OrderSpec};
use crate::record::{OrderId, Outcome, Status};
use std::collections::{BTreeMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::watch;
use tokio::time::Instant;

/// Default bytes kept of each of stdout and stderr.
pub const DEFAULT_OUTPUT_LIMIT: usize = 64 * 1024;

/// Default time limit of an order that names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long output is still read after the job's main process exits.
pub const EXIT_GRACE: Duration = Duration::from_secs(1);

/// How long reaping a killed process, or `docker kill`, may take.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Used when the worker has no `PATH` (the usual `confstr(_CS_PATH)` value).
const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Everything about one run of one order that is not in the order itself.
#[derive(Clone, Debug)]
pub struct JobContext {
    pub order: OrderId,
    /// This worker's instance number (`INSTANCE_NUMBER`).
    pub instance: u32,
    /// Which run of the order this is, 1 for the first (`ORDER_ATTEMPT`).
    pub attempt: u32,
    /// The limit for orders that do not set `timeout_secs`.
    pub default_timeout: Duration,
    /// Bytes kept of the end of each of stdout and stderr.
    pub output_limit: usize,
    /// Environment variable names removed from the job's environment: exact
    /// names, or prefixes written with a trailing `*` (`KAFKA_*`).
    pub env_deny: Vec<String>,
    /// `None` allows every program; see [`program_allowed`].
    pub allowed_commands: Option<Vec<String>>,
    /// The docker CLI used for `image` orders (`"docker"`, found in `PATH`).
    pub docker_program: String,
}

impl JobContext {
    /// A context with the default limits, no deny list and no allow list.
    pub fn new(order: OrderId, instance: u32, attempt: u32) -> Self {
        JobContext {
            order,
            instance,
            attempt,
            default_timeout: DEFAULT_TIMEOUT,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            env_deny: Vec::new(),
            allowed_commands: None,
            docker_program: "docker".into(),
        }
    }

    /// The container name of an `image` order: unique per order and attempt,
    /// so that a timed-out container can be found and killed.
    fn container_name(&self) -> String {
        format!(
            "pool_worker-{}-{}-{}-a{}",
            self.instance, self.order.partition, self.order.offset, self.attempt
        )
    }
}

/// Whether the allow list lets `argv0` run. `None` allows everything.
///
/// An entry without `/` is a program name: it matches `argv0` exactly or the
/// file name of `argv0` (`python3` allows `/usr/bin/python3`, and also any
/// other file called `python3`; use a path entry to pin the location). An
/// entry with `/` is a path prefix matched on whole components (`/opt/jobs`
/// allows `/opt/jobs/x` but not `/opt/jobs2/x`); an `argv0` with a `..`
/// component never matches a prefix.
pub fn program_allowed(argv0: &str, allowed: &Option<Vec<String>>) -> bool {
    let Some(allowed) = allowed else { return true };
    if argv0.is_empty() {
        return false;
    }
    let file_name = argv0.rsplit('/').next().unwrap_or(argv0);
    let climbs = argv0.split('/').any(|c| c == "..");
    allowed.iter().any(|entry| {
        if entry.is_empty() {
            false
        } else if !entry.contains('/') {
            argv0 == entry || file_name == entry
        } else if argv0 == entry {
            true
        } else {
            let dir = entry.trim_end_matches('/');
            !climbs
                && argv0
                    .strip_prefix(dir)
                    .is_some_and(|rest| rest.starts_with('/'))
        }
    })
}

/// Runs one order to its end and says how it ended. When `cancel` becomes
/// `true` the job's process group is killed and the outcome is an `error`
/// starting with `cancelled:`. A dropped sender never cancels.
pub async fn run(spec: &OrderSpec, ctx: &JobContext, mut cancel: watch::Receiver<bool>) -> Outcome {
    let (program, args) = match &spec.kind {
        OrderKind::Url { .. } => {
            return Outcome::not_run(Status::Error, "URL orders must be fetched before running")
        }
        // `parse` guarantees one script; a hand-built spec gets its words joined.
        OrderKind::Command { argv } if spec.shell => {
            ("sh".to_string(), vec!["-c".into(), argv.join(" ")])
        }
        OrderKind::Command { argv } => match argv.split_first() {
            Some((p, rest)) if !p.is_empty() => (p.clone(), rest.to_vec()),
            _ => return Outcome::not_run(Status::Error, "the order has no program"),
        },
        OrderKind::Image { image, args } => (
            ctx.docker_program.clone(),
            docker_args(spec, ctx, image, args),
        ),
    };
    if !program_allowed(&program, &ctx.allowed_commands) {
        return Outcome::not_run(
            Status::Refused,
            format!("program '{program}' is not in the allowed commands"),
        );
    }
    if *cancel.borrow() {
        return Outcome::not_run(Status::Error, "cancelled: before the job started");
    }
    let Some(path) = resolve(&program) else {
        return Outcome::not_run(
            Status::Error,
            format!("cannot run '{program}': not found in PATH"),
        );
    };

    let mut cmd = Command::new(&path);
    cmd.arg0(&program)
        .args(&args)
        .env_clear()
        .envs(job_env(std::env::vars_os(), spec, ctx))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // Should this future be dropped, the main process dies with it and
        // `Group` below kills the rest.
        .kill_on_drop(true);
    // Should the worker be killed (SIGKILL), its job's main process dies
    // with it instead of running on as an orphan beside the retry that the
    // next incarnation starts. This future runs on a runtime worker thread,
    // which lives as long as the process. (A process the job started that
    // left the job's main process behind is not covered: see the module doc.)
    crate::supervise::die_with_parent(&mut cmd);

    let started = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let mut o = Outcome::not_run(Status::Error, format!("cannot run '{program}': {e}"));
            o.duration_ms = millis(started.elapsed());
            return o;
        }
    };
    // (killpg(0) or killpg(1) would hit the worker or everything: never.)
    let group = child
        .id()
        .filter(|&pid| pid > 1)
        .map(|pid| Group(pid as libc::pid_t));

    let limit = spec.timeout.unwrap_or(ctx.default_timeout);
    // An absurd limit is "never", not an overflow.
    let deadline = started
        .checked_add(limit)
        .unwrap_or_else(|| started + Duration::from_secs(30 * 365 * 86400));

    let mut out = Tail::new(ctx.output_limit);
    let mut err = Tail::new(ctx.output_limit);
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let end = {
        let reading = async {
            tokio::join!(drain(stdout, &mut out), drain(stderr, &mut err));
        };
        tokio::pin!(reading);
        let mut read_done = false;
        let end = loop {
            tokio::select! {
                status = child.wait() => break End::Exited(status),
                () = &mut reading, if !read_done => read_done = true,
                () = tokio::time::sleep_until(deadline) => break End::TimedOut,
                () = cancelled(&mut cancel) => break End::Cancelled,
            }
        };
        if !matches!(end, End::Exited(_)) {
            // Kill before reaping: while the main process is an unreaped
            // zombie its pid, hence the group id, cannot be reused.
            if let Some(g) = &group {
                g.kill();
            }
            let _ = tokio::time::timeout(KILL_WAIT, child.wait()).await;
            if matches!(spec.kind, OrderKind::Image { .. }) {
                // Killing the docker CLI does not stop its container.
                docker_kill(ctx).await;
            }
        }
        if !read_done {
            let _ = tokio::time::timeout(EXIT_GRACE, &mut reading).await;
        }
        end
    };
    // Kills whatever the job left behind. The main process is reaped by
    // now, but Linux does not reuse a pid while a group of that id has members.
    drop(group);

    let mut outcome = match end {
        End::Exited(Ok(status)) => exited(status),
        End::Exited(Err(e)) => Outcome::not_run(
            Status::Error,
            format!("waiting for '{program}' failed: {e}"),
        ),
        End::TimedOut => Outcome::not_run(
            Status::TimedOut,
            format!("time limit of {} s passed", limit.as_secs_f64()),
        ),
        End::Cancelled => Outcome::not_run(Status::Error, "cancelled: the worker stopped the job"),
    };
    outcome.duration_ms = millis(started.elapsed());
    outcome.stdout_tail = out.into_string();
    outcome.stderr_tail = err.into_string();
    outcome
}

enum End {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Cancelled,
}

fn exited(status: ExitStatus) -> Outcome {
    let mut o = Outcome::not_run(Status::Ok, "");
    o.reason = None;
    match (status.code(), status.signal()) {
        (Some(0), _) => o.exit_code = Some(0),
        (Some(code), _) => {
            o.status = Status::Failed;
            o.exit_code = Some(code);
        }
        (None, signal) => {
            o.status = Status::Failed;
            o.reason = Some(match signal {
                Some(s) => format!("killed by signal {s}"),
                None => format!("ended with {status}"),
            });
        }
    }
    o
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Resolves once `cancel` is `true`; never, if its sender is gone.
async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A job's process group, killed when this is dropped.
struct Group(libc::pid_t);

impl Group {
    fn kill(&self) {
        // SAFETY: killpg has no memory effects; a group that is already
        // gone is ESRCH, which is fine.
        unsafe {
            libc::killpg(self.0, libc::SIGKILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `program` itself if it names a path, else the first executable file of
/// that name in the worker's `PATH`.
fn resolve(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| FALLBACK_PATH.into());
    std::env::split_paths(&path)
        // An empty entry would mean the worker's current directory.
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The job's environment, from the worker's (`inherited`): see the module docs.
fn job_env(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    spec: &OrderSpec,
    ctx: &JobContext,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = inherited.into_iter().collect();
    env.extend(spec.env.iter().map(|(k, v)| (k.into(), v.into())));
    env.retain(|name, _| !denied(name, &ctx.env_deny));
    for (name, value) in own_vars(ctx) {
        env.insert(name.into(), value.into());
    }
    env
}

/// The variables that tell a job which order and run it is.
fn own_vars(ctx: &JobContext) -> [(&'static str, String); 5] {
    [
        ("ORDER_PARTITION", ctx.order.partition.to_string()),
        ("ORDER_OFFSET", ctx.order.offset.to_string()),
        ("INSTANCE_NUMBER", ctx.instance.to_string()),
        ("ORDER_ATTEMPT", ctx.attempt.to_string()),
        (
            "ORDER_RETRY",
            if ctx.attempt > 1 { "1" } else { "0" }.to_string(),
        ),
    ]
}

fn denied(name: &OsStr, deny: &[String]) -> bool {
    let name = name.as_bytes();
    deny.iter().any(|d| match d.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix.as_bytes()),
        None => name == d.as_bytes(),
    })
}

/// `docker run` arguments for an image order. Variables are passed as
/// `-e NAME`, which copies the value from the docker CLI's own environment
/// (the job environment built above): values never appear on a command line
/// that every local user can read in /proc.
fn docker_args(spec: &OrderSpec, ctx: &JobContext, image: &str, args: &[String]) -> Vec<String> {
    let mut v = vec![
        "run".into(),
        "--rm".into(),
        "--name".into(),
        ctx.container_name(),
    ];
    let own = own_vars(ctx).map(|(name, _)| name);
    let from_order = spec.env.keys().map(String::as_str);
    let from_order =
        from_order.filter(|k| !denied(OsStr::new(k), &ctx.env_deny) && !own.contains(k));
    for name in from_order.chain(own) {
        v.push("-e".into());
        v.push(name.into());
    }
    v.push(image.into());
    v.extend(args.iter().cloned());
    v
}

/// Best effort: stop the container of a killed image order.
async fn docker_kill(ctx: &JobContext) {
    let Some(path) = resolve(&ctx.docker_program) else {
        return;
    };
    let mut cmd = Command::new(path);
    cmd.args(["kill", &ctx.container_name()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Ok(mut child) = cmd.spawn() {
        let _ = tokio::time::timeout(KILL_WAIT, child.wait()).await;
    }
}

/// Reads a pipe to its end, keeping the tail.
async fn drain<R: AsyncRead + Unpin>(pipe: Option<R>, tail: &mut Tail) {
    let Some(mut pipe) = pipe else { return };
    let mut buf = vec![0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => tail.push(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The last `limit` bytes of a stream (memory stays at about `limit`
/// whatever the stream's length).
#[derive(Debug)]
pub struct Tail {
    buf: VecDeque<u8>,
    limit: usize,
    cut: bool,
}

impl Tail {
    pub fn new(limit: usize) -> Self {
        Tail {
            buf: VecDeque::new(),
            limit,
            cut: false,
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        if data.len() >= self.limit {
            self.cut |= !self.buf.is_empty() || data.len() > self.limit;
            self.buf.clear();
            self.buf.extend(&data[data.len() - self.limit..]);
        } else {
            let excess = (self.buf.len() + data.len()).saturating_sub(self.limit);
            if excess > 0 {
                self.cut = true;
                self.buf.drain(..excess);
            }
            self.buf.extend(data);
        }
    }

    /// The tail as text: invalid UTF-8 replaced, a character split by the
    /// cut dropped, and never more than `limit` bytes even after replacement.
    pub fn into_string(mut self) -> String {
        let bytes = self.buf.make_contiguous();
        let mut start = 0;
        if self.cut {
            while start < bytes.len().min(3) && bytes[start] & 0xC0 == 0x80 {
                start += 1;
            }
        }
        let text = String::from_utf8_lossy(&bytes[start..]);
        if text.len() <= self.limit {
            return text.into_owned();
        }
        let mut from = text.len() - self.limit;
        while !text.is_char_boundary(from) {
            from += 1;
        }
        text[from..].to_string()
    }
}

// ---------------------------------------------------------------------------
// Fetching URL orders.

/// Longest status or header line accepted from a server.
const MAX_LINE: usize = 8 * 1024;
/// Most header lines accepted from a server.
const MAX_HEADERS: usize = 100;

/// Whether a (lower-cased) URL's path has a `..` segment, literally or
/// percent-encoded (`%2e%2e`, `.%2e`, `%2e.`), or an encoded slash that
/// could hide one.
fn climbs(url: &str) -> bool {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let path = path.split_once("://").map_or(path, |(_, rest)| rest);
    if path.contains("%2f") || path.contains("%5c") || path.contains('\\') {
        return true;
    }
    path.split('/').any(|seg| seg.replace("%2e", ".") == "..")
}

/// Fetches the body of a URL order: an HTTP/1.1 `GET` of a plain `http://`
/// URL that must answer `200` within `timeout` with at most `max_bytes` of
/// body (`Content-Length`, chunked, or read to close). With `allowed_urls`,
/// the URL must start with one of the prefixes (end them with `/`:
/// `http://orders.internal` also matches `http://orders.internal.evil.net`).
pub async fn fetch_order(
    url: &str,
    max_bytes: usize,
    timeout: Duration,
    allowed_urls: &Option<Vec<String>>,
) -> Result<Vec<u8>, String> {
    if let Some(allowed) = allowed_urls {
        // A prefix check means nothing if the path can climb out of it:
        // servers resolve `..` (and its percent-encoded forms) before they
        // look the path up.
        let lower = url.to_ascii_lowercase();
        if climbs(&lower) {
            return Err(format!("URL {url} climbs out with '..', so it is not under an allowed prefix"));
        }
        if !allowed
            .iter()
            .any(|prefix| url.starts_with(prefix.as_str()))
        {
            return Err(format!("URL {url} is not under an allowed prefix"));
        }
    }
    let target = HttpUrl::parse(url)?;
    match tokio::time::timeout(timeout, get(&target, max_bytes)).await {
        Ok(result) => result.map_err(|e| format!("fetching {url}: {e}")),
        Err(_) => Err(format!(
            "fetching {url} took more than {} s",
            timeout.as_secs_f64()
        )),
    }
}

#[derive(Debug, PartialEq)]
struct HttpUrl {
    host: String,
    port: u16,
    /// Path and query, as sent in the request line.
    target: String,
}

impl HttpUrl {
    fn parse(url: &str) -> Result<HttpUrl, String> {
        let has_scheme = |s: &str| {
            url.get(..s.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(s))
        };
        if has_scheme("https://") {
            return Err("https URLs are not supported".into());
        }
        if !has_scheme("http://") {
            return Err(format!("{url} is not an http:// URL"));
        }
        // Anything sent on the wire must not be able to end a header line.
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("URL contains a space or control character".into());
        }
        let rest = &url["http://".len()..];
        let rest = rest.split('#').next().unwrap_or_default();
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, target) = rest.split_at(split);
        let target = match target.chars().next() {
            None => "/".to_string(),
            Some('?') => format!("/{target}"),
            Some(_) => target.to_string(),
        };
        if authority.contains('@') {
            return Err("credentials in URLs are not supported".into());
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (host, after) = v6.split_once(']').ok_or("bad IPv6 address in URL")?;
                (host, after.strip_prefix(':'))
            }
            None => match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            },
        };
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| format!("bad port in {url}"))?,
        };
        if host.is_empty() {
            return Err(format!("no host in {url}"));
        }
        Ok(HttpUrl {
            host: host.to_string(),
            port,
            target,
        })
    }

    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

async fn get(url: &HttpUrl, max_bytes: usize) -> Result<Vec<u8>, String> {
    let mut stream = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: pool_worker\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        url.target,
        url.host_header()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot send the request: {e}"))?;
    let mut rd = BufReader::new(stream);

    let status_line = read_line(&mut rd).await?;
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1 response: {:.80}", status_line));
    }
    if code != "200" {
        return Err(format!("the server answered {:.80}", status_line));
    }

    let mut length: Option<usize> = None;
    let mut chunked = false;
    for n in 0.. {
        if n == MAX_HEADERS {
            return Err("too many response headers".into());
        }
        let line = read_line(&mut rd).await?;
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.trim().eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .map_err(|_| format!("bad Content-Length {value:.40}"))?;
            if length.is_some_and(|l| l != n) {
                return Err("conflicting Content-Length headers".into());
            }
            length = Some(n);
        } else if name.trim().eq_ignore_ascii_case("transfer-encoding") {
            match value.to_ascii_lowercase().as_str() {
                "chunked" => chunked = true,
                "identity" => {}
                other => return Err(format!("unsupported Transfer-Encoding {other:.40}")),
            }
        }
    }

    let too_large = || format!("the order is larger than {max_bytes} bytes");
    if chunked {
        return read_chunked(&mut rd, max_bytes).await;
    }
    match length {
        Some(n) if n > max_bytes => Err(too_large()),
        Some(n) => {
            let mut body = vec![0; n];
            rd.read_exact(&mut body)
                .await
                .map_err(|_| "body shorter than its Content-Length".to_string())?;
            Ok(body)
        }
        None => {
            let mut body = Vec::new();
            let limit = u64::try_from(max_bytes)
                .unwrap_or(u64::MAX)
                .saturating_add(1);
            (&mut rd)
                .take(limit)
                .read_to_end(&mut body)
                .await
                .map_err(|e| format!("reading the body: {e}"))?;
            if body.len() > max_bytes {
                return Err(too_large());
            }
            Ok(body)
        }
    }
}

async fn read_chunked<R: AsyncBufRead + Unpin>(
    rd: &mut R,
    max_bytes: usize,
) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line = read_line(rd).await?;
        let size = line.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(size, 16).map_err(|_| format!("bad chunk size {size:.20}"))?;
        if size == 0 {
            return Ok(body); // trailers, if any, are not needed
        }
        if size > max_bytes.saturating_sub(body.len()) {
            return Err(format!("the order is larger than {max_bytes} bytes"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        rd.read_exact(&mut body[start..])
            .await
            .map_err(|_| "truncated chunk".to_string())?;
        if !read_line(rd).await?.is_empty() {
            return Err("chunk longer than its size".into());
        }
    }
}

/// One CRLF- (or LF-) terminated line, at most [`MAX_LINE`] bytes.
async fn read_line<R: AsyncBufRead + Unpin>(rd: &mut R) -> Result<String, String> {
    let mut line = Vec::new();
    (&mut *rd)
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut line)
        .await
        .map_err(|e| format!("reading the response: {e}"))?;
    if line.last() != Some(&b'\n') {
        return Err(if line.len() >= MAX_LINE {
            "response line too long".into()
        } else {
            "connection closed in the middle of the response".into()
        });
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

#[cfg(test)]
mod url_tests {
    use super::climbs;

    #[test]
    fn dot_dot_in_any_form_climbs() {
        for u in ["http://h/a/../b", "http://h/a/%2e%2e/b", "http://h/a/.%2e/b", "http://h/a/%2e./b", "http://h/a%2f..%2fb", "http://h/a/.."] {
            assert!(climbs(u), "{u}");
        }
        for u in ["http://h/a/b", "http://h/a/..b/c", "http://h/a/b?x=../y", "http://h/a.b/c"] {
            assert!(!climbs(u), "{u}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;
    use tokio::net::TcpListener;

    fn cmd(argv: &[&str]) -> OrderSpec {
        OrderSpec {
            kind: OrderKind::Command {
                argv: argv.iter().map(|s| s.to_string()).collect(),
            },
            env: BTreeMap::new(),
            timeout: None,
            id: None,
            shell: false,
        }
    }

    fn sh(script: &str) -> OrderSpec {
        OrderSpec {
            shell: true,
            ..cmd(&[script])
        }
    }

    fn ctx() -> JobContext {
        JobContext::new(OrderId::new(2, 40), 3, 1)
    }

    fn never() -> watch::Receiver<bool> {
        watch::channel(false).1
    }

    async fn run_(spec: &OrderSpec, ctx: &JobContext) -> Outcome {
        run(spec, ctx, never()).await
    }

    /// Whether the process is gone: no /proc entry, or a zombie waiting for
    /// an init that may not reap.
    fn dead(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    /// SIGKILL is delivered asynchronously; allow a dying process a moment.
    async fn assert_dies(pid: u32) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !dead(pid) {
            assert!(Instant::now() < deadline, "process {pid} survived its job");
            tokio::task::yield_now().await;
        }
    }

    /// Writes an executable script from a child process, so that no fd open
    /// for writing leaks into a concurrent fork (which would make exec fail
    /// with ETXTBSY).
    fn script(path: &Path, body: &str) {
        let ok = std::process::Command::new("sh")
            .args([
                "-c",
                r#"printf '%s\n' "$1" > "$2" && chmod +x "$2""#,
                "sh",
                body,
            ])
            .arg(path)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    #[tokio::test]
    async fn exit_codes() {
        let o = run_(&cmd(&["true"]), &ctx()).await;
        assert_eq!(
            (o.status, o.exit_code, o.reason),
            (Status::Ok, Some(0), None)
        );
        let o = run_(&sh("echo out; echo err >&2; exit 3"), &ctx()).await;
        assert_eq!((o.status, o.exit_code), (Status::Failed, Some(3)));
        assert_eq!(
            (o.stdout_tail.as_str(), o.stderr_tail.as_str()),
            ("out\n", "err\n")
        );
        let o = run_(&sh("kill -TERM $$"), &ctx()).await;
        assert_eq!((o.status, o.exit_code), (Status::Failed, None));
        assert_eq!(o.reason.as_deref(), Some("killed by signal 15"));
    }

    #[tokio::test]
    async fn output_tail_is_bounded_and_is_the_end() {
        let mut c = ctx();
        c.output_limit = 1000;
        let job = sh("head -c 1000000 /dev/zero | tr '\\0' a; printf END; head -c 3000000 /dev/zero >&2; printf ERR >&2");
        let o = run_(&job, &c).await;
        assert_eq!(o.status, Status::Ok);
        assert_eq!(o.stdout_tail.len(), 1000);
        assert!(o.stdout_tail.ends_with("aaaEND"));
        assert_eq!(o.stderr_tail.len(), 1000);
        assert!(o.stderr_tail.ends_with("\0ERR"));
    }

    #[test]
    fn tail_keeps_the_last_bytes() {
        let mut t = Tail::new(4);
        t.push(b"ab");
        t.push(b"cde");
        assert_eq!(t.buf.len(), 4);
        t.push(b"");
        assert_eq!(t.into_string(), "bcde");
        let mut t = Tail::new(4);
        t.push(b"x");
        t.push(b"0123456789");
        assert_eq!(t.into_string(), "6789");
        let mut t = Tail::new(0);
        t.push(b"abc");
        assert_eq!(t.into_string(), "");
        // A cut through "é" drops its stray continuation byte.
        let mut t = Tail::new(2);
        t.push("zé!".as_bytes());
        assert_eq!(t.into_string(), "!");
        let mut t = Tail::new(3);
        t.push("zé!".as_bytes());
        assert_eq!(t.into_string(), "é!");
        // Replacement characters (3 bytes each) do not exceed the limit.
        let mut t = Tail::new(4);
        t.push(b"\xff\xff\xff\xff");
        assert_eq!(t.into_string(), "\u{fffd}");
    }

    proptest! {
        #[test]
        fn tail_matches_a_model(limit in 0usize..40, chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..60), 0..20)) {
            let mut t = Tail::new(limit);
            let mut all = Vec::new();
            for c in &chunks {
                t.push(c);
                all.extend_from_slice(c);
                prop_assert!(t.buf.len() <= limit);
            }
            prop_assert_eq!(t.buf.iter().copied().collect::<Vec<_>>(), all[all.len().saturating_sub(limit)..].to_vec());
            prop_assert!(t.into_string().len() <= limit);
        }
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("bg");
        let mut job = sh(&format!(
            "sleep 30 & echo $! > {}; sleep 30",
            pidfile.display()
        ));
        job.timeout = Some(Duration::from_millis(700));
        let o = run_(&job, &ctx()).await;
        assert_eq!(o.status, Status::TimedOut);
        assert_eq!(o.reason.as_deref(), Some("time limit of 0.7 s passed"));
        assert!((700..10_000).contains(&o.duration_ms), "{}", o.duration_ms);
        let pid: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_dies(pid).await;
    }

    #[tokio::test]
    async fn default_timeout_applies() {
        let mut c = ctx();
        c.default_timeout = Duration::from_millis(300);
        let o = run_(&cmd(&["sleep", "30"]), &c).await;
        assert_eq!(o.status, Status::TimedOut);
        assert_eq!(o.reason.as_deref(), Some("time limit of 0.3 s passed"));
    }

    #[tokio::test]
    async fn leftovers_holding_the_pipes_are_killed_after_exit() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("bg");
        let job = sh(&format!(
            "sleep 30 & echo $! > {}; echo main done",
            pidfile.display()
        ));
        let o = run_(&job, &ctx()).await;
        assert_eq!(
            (o.status, o.stdout_tail.as_str()),
            (Status::Ok, "main done\n")
        );
        assert!(o.duration_ms < 10_000);
        let pid: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_dies(pid).await;
    }

    #[test]
    fn environment_is_built_in_layers() {
        let inherited = [
            ("PATH", "/bin"),
            ("KAFKA_PASSWORD", "s"),
            ("KAFKA_X", "s"),
            ("SECRET", "s"),
            ("SECRETS", "ok"),
            ("ORDER_OFFSET", "forged"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let mut spec = cmd(&["x"]);
        spec.env.insert("FOO".into(), "bar".into());
        spec.env.insert("ORDER_ATTEMPT".into(), "99".into());
        spec.env.insert("KAFKA_FROM_ORDER".into(), "x".into());
        let mut c = JobContext::new(OrderId::new(2, 40), 3, 2);
        c.env_deny = vec!["KAFKA_*".into(), "SECRET".into()];
        let env = job_env(inherited, &spec, &c);
        let get = |k: &str| env.get(OsStr::new(k)).map(|v| v.to_str().unwrap());
        assert_eq!(get("PATH"), Some("/bin"));
        assert_eq!(get("FOO"), Some("bar"));
        assert_eq!(get("SECRETS"), Some("ok"));
        for gone in ["KAFKA_PASSWORD", "KAFKA_X", "SECRET", "KAFKA_FROM_ORDER"] {
            assert_eq!(get(gone), None, "{gone}");
        }
        assert_eq!(get("ORDER_PARTITION"), Some("2"));
        assert_eq!(get("ORDER_OFFSET"), Some("40"));
        assert_eq!(get("INSTANCE_NUMBER"), Some("3"));
        assert_eq!(get("ORDER_ATTEMPT"), Some("2"));
        assert_eq!(get("ORDER_RETRY"), Some("1"));
    }

    #[tokio::test]
    async fn job_sees_its_environment() {
        let mut spec = sh(
            r#"echo "$ORDER_PARTITION $ORDER_OFFSET $INSTANCE_NUMBER $ORDER_ATTEMPT $ORDER_RETRY $FOO ${PATH:+path} ${HOME-nohome}""#,
        );
        spec.env.insert("FOO".into(), "bar baz".into());
        spec.env.insert("ORDER_RETRY".into(), "forged".into());
        let mut c = ctx();
        c.env_deny = vec!["HOME".into()];
        let o = run_(&spec, &c).await;
        assert_eq!(o.stdout_tail, "2 40 3 1 0 bar baz path nohome\n");
    }

    #[tokio::test]
    async fn order_path_does_not_choose_the_program() {
        let dir = tempfile::tempdir().unwrap();
        script(&dir.path().join("true"), "#!/bin/sh\necho hijacked");
        let mut spec = cmd(&["true"]);
        spec.env
            .insert("PATH".into(), dir.path().display().to_string());
        let o = run_(&spec, &ctx()).await;
        assert_eq!((o.status, o.stdout_tail.as_str()), (Status::Ok, ""));
    }

    #[tokio::test]
    async fn unrunnable_programs_are_errors() {
        let o = run_(&cmd(&["no-such-program-pw"]), &ctx()).await;
        assert_eq!(o.status, Status::Error);
        assert_eq!(
            o.reason.as_deref(),
            Some("cannot run 'no-such-program-pw': not found in PATH")
        );
        let o = run_(&cmd(&["/nonexistent/prog"]), &ctx()).await;
        assert_eq!(o.status, Status::Error);
        let reason = o.reason.unwrap();
        assert!(
            reason.contains("/nonexistent/prog") && reason.contains("No such file"),
            "{reason}"
        );
        let dir = tempfile::tempdir().unwrap();
        let o = run_(&cmd(&[dir.path().to_str().unwrap()]), &ctx()).await;
        assert_eq!(o.status, Status::Error);
        assert!(o.reason.unwrap().contains("ermission denied"));
        let o = run_(&cmd(&[]), &ctx()).await;
        assert_eq!(o.status, Status::Error);
    }

    #[test]
    fn allow_list_rules() {
        let allowed = Some(vec![
            "python3".to_string(),
            "/opt/jobs".to_string(),
            "/usr/local/bin/tool".to_string(),
        ]);
        assert!(program_allowed("anything", &None));
        assert!(program_allowed("python3", &allowed));
        assert!(program_allowed("/usr/bin/python3", &allowed));
        assert!(program_allowed("/opt/jobs/x", &allowed));
        assert!(program_allowed("/opt/jobs/sub/x", &allowed));
        assert!(program_allowed("/usr/local/bin/tool", &allowed));
        assert!(!program_allowed("/usr/local/bin/tool2", &allowed));
        assert!(!program_allowed("/opt/jobs2/x", &allowed));
        assert!(!program_allowed("/opt/jobs/../../bin/sh", &allowed));
        assert!(!program_allowed("python", &allowed));
        assert!(!program_allowed("", &allowed));
        assert!(!program_allowed("x", &Some(vec![String::new()])));
        assert!(!program_allowed("x", &Some(vec![])));
    }

    #[tokio::test]
    async fn refused_commands_never_run() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let mut c = ctx();
        c.allowed_commands = Some(vec!["true".into()]);
        let o = run_(&cmd(&["touch", marker.to_str().unwrap()]), &c).await;
        assert_eq!(o.status, Status::Refused);
        assert!(o.reason.unwrap().contains("'touch'"));
        let o = run_(&sh(&format!("touch {}", marker.display())), &c).await;
        assert_eq!(
            o.status,
            Status::Refused,
            "shell orders are checked as 'sh'"
        );
        assert!(!marker.exists());
        c.allowed_commands = Some(vec!["sh".into()]);
        assert_eq!(run_(&sh("exit 0"), &c).await.status, Status::Ok);
    }

    #[tokio::test]
    async fn cancel_kills_the_job() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let (tx, rx) = watch::channel(false);
        let spec = sh(&format!("sleep 30 & echo $! > {}; wait", fifo.display()));
        let job = tokio::spawn(async move { run(&spec, &ctx(), rx).await });
        // Opening the FIFO blocks until the job writes: the job is running.
        let read = tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo));
        let pid: u32 = tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        tx.send(true).unwrap();
        let o = tokio::time::timeout(Duration::from_secs(10), job)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(o.status, Status::Error);
        assert!(o.reason.unwrap().starts_with("cancelled: "));
        assert_dies(pid).await;

        let (tx, rx) = watch::channel(true);
        let o = run(&cmd(&["true"]), &ctx(), rx).await;
        assert_eq!(
            o.reason.as_deref(),
            Some("cancelled: before the job started")
        );
        drop(tx);
        // A dropped sender is not a cancellation.
        let (tx, rx) = watch::channel(false);
        drop(tx);
        assert_eq!(run(&cmd(&["true"]), &ctx(), rx).await.status, Status::Ok);
    }

    #[tokio::test]
    async fn image_orders_run_docker() {
        let dir = tempfile::tempdir().unwrap();
        let docker = dir.path().join("docker");
        script(
            &docker,
            r#"#!/bin/sh
d=$(dirname "$0")
if [ "$1" = kill ]; then echo "$@" >> "$d/killed"; exit 0; fi
printf '%s\n' "$@" > "$d/argv"
echo "A=$A ORDER_OFFSET=$ORDER_OFFSET"
exec sleep 30
"#,
        );
        let mut c = ctx();
        c.docker_program = docker.to_str().unwrap().into();
        c.allowed_commands = Some(vec!["docker".into()]);
        let mut spec = cmd(&[]);
        spec.kind = OrderKind::Image {
            image: "alpine:3".into(),
            args: vec!["echo".into(), "a b".into()],
        };
        spec.env.insert("A".into(), "secret value".into());
        spec.timeout = Some(Duration::from_millis(1500));
        let o = run_(&spec, &c).await;
        assert_eq!(o.status, Status::TimedOut);
        assert_eq!(o.stdout_tail, "A=secret value ORDER_OFFSET=40\n");
        let argv = std::fs::read_to_string(dir.path().join("argv")).unwrap();
        let expected = [
            "run",
            "--rm",
            "--name",
            "pool_worker-3-2-40-a1",
            "-e",
            "A",
            "-e",
            "ORDER_PARTITION",
            "-e",
            "ORDER_OFFSET",
            "-e",
            "INSTANCE_NUMBER",
            "-e",
            "ORDER_ATTEMPT",
            "-e",
            "ORDER_RETRY",
            "alpine:3",
            "echo",
            "a b",
        ];
        assert_eq!(argv.lines().collect::<Vec<_>>(), expected);
        let killed = std::fs::read_to_string(dir.path().join("killed")).unwrap();
        assert_eq!(killed, "kill pool_worker-3-2-40-a1\n");

        c.allowed_commands = Some(vec!["podman".into()]);
        assert_eq!(run_(&spec, &c).await.status, Status::Refused);
    }

    #[tokio::test]
    async fn url_orders_are_not_run() {
        let mut spec = cmd(&[]);
        spec.kind = OrderKind::Url {
            url: "http://h/".into(),
        };
        let o = run_(&spec, &ctx()).await;
        assert_eq!(
            (o.status, o.reason.as_deref()),
            (
                Status::Error,
                Some("URL orders must be fetched before running")
            )
        );
    }

    /// A one-connection HTTP server answering `response`; yields the request.
    async fn serve(response: &'static [u8]) -> (String, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut rd = BufReader::new(stream);
            let mut request = String::new();
            while !request.ends_with("\r\n\r\n") {
                if rd.read_line(&mut request).await.unwrap() == 0 {
                    break;
                }
            }
            if response.is_empty() {
                std::future::pending::<()>().await; // never answer
            }
            rd.get_mut().write_all(response).await.unwrap();
            request
        });
        (base, task)
    }

    const SEC: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn fetch_bodies() {
        let (base, req) =
            serve(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nX: y\r\n\r\necho hiIGNORED").await;
        let body = fetch_order(
            &format!("{base}/orders/1?x=y#frag"),
            100,
            SEC,
            &Some(vec![format!("{base}/orders/")]),
        )
        .await;
        assert_eq!(body.unwrap(), b"echo hi");
        let request = req.await.unwrap();
        assert!(
            request.starts_with("GET /orders/1?x=y HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(request.contains(&format!("\r\nHost: {}\r\n", &base["http://".len()..])));

        let (base, _) = serve(b"HTTP/1.0 200 OK\r\n\r\nto the end").await;
        assert_eq!(
            fetch_order(&base, 100, SEC, &None).await.unwrap(),
            b"to the end"
        );

        let (base, _) = serve(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=1\r\necho\r\n3\r\n hi\r\n0\r\n\r\n").await;
        assert_eq!(
            fetch_order(&base, 100, SEC, &None).await.unwrap(),
            b"echo hi"
        );
    }

    #[tokio::test]
    async fn fetch_failures() {
        let (base, _) = serve(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").await;
        let e = fetch_order(&base, 100, SEC, &None).await.unwrap_err();
        assert!(e.contains("404 Not Found"), "{e}");

        let (base, _) = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world").await;
        assert!(fetch_order(&base, 10, SEC, &None)
            .await
            .unwrap_err()
            .contains("larger than 10 bytes"));
        let (base, _) = serve(b"HTTP/1.1 200 OK\r\n\r\nhello world").await;
        assert!(fetch_order(&base, 10, SEC, &None)
            .await
            .unwrap_err()
            .contains("larger than 10 bytes"));
        let (base, _) = serve(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n").await;
        assert!(fetch_order(&base, 10, SEC, &None)
            .await
            .unwrap_err()
            .contains("larger than 10 bytes"));
        let (base, _) = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort").await;
        assert!(fetch_order(&base, 100, SEC, &None)
            .await
            .unwrap_err()
            .contains("shorter"));

        let (base, _) = serve(b"").await;
        let e = fetch_order(&base, 100, Duration::from_millis(200), &None)
            .await
            .unwrap_err();
        assert!(e.contains("took more than 0.2 s"), "{e}");

        let allowed = Some(vec!["http://orders.internal/".to_string()]);
        let e = fetch_order("http://127.0.0.1:9/x", 100, SEC, &allowed)
            .await
            .unwrap_err();
        assert!(e.contains("not under an allowed prefix"), "{e}");
        let e = fetch_order("https://orders.internal/x", 100, SEC, &None)
            .await
            .unwrap_err();
        assert_eq!(e, "https URLs are not supported");
    }

    #[test]
    fn urls_parse() {
        let u = HttpUrl::parse("HTTP://Example.com").unwrap();
        assert_eq!(
            u,
            HttpUrl {
                host: "Example.com".into(),
                port: 80,
                target: "/".into()
            }
        );
        assert_eq!(u.host_header(), "Example.com");
        let u = HttpUrl::parse("http://[::1]:8080?q").unwrap();
        assert_eq!(
            u,
            HttpUrl {
                host: "::1".into(),
                port: 8080,
                target: "/?q".into()
            }
        );
        assert_eq!(u.host_header(), "[::1]:8080");
        for bad in [
            "http://",
            "http://h:0/",
            "http://h:99999/",
            "http://u:p@h/",
            "http://h/a\r\nX: y",
            "ftp://h/",
            "http://[::1/",
        ] {
            assert!(HttpUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
