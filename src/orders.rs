//! Work orders: what a message of the orders topic asks the pool to run.
//!
//! An order is the raw payload of one Kafka message. Anyone who can produce to
//! the topic writes orders, so this module treats every payload as hostile
//! input: it is pure (no I/O), it never panics, and it turns anything it
//! cannot run into an [`OrderError`] with a reason a person can act on. The
//! worker records that reason as the order's `error` outcome, so a bad order
//! is answered, never retried forever and never silently dropped.
//!
//! Two forms are accepted, told apart by the first non-blank character:
//!
//! * **Plain text** — a command line, split into words the way a POSIX shell
//!   splits them (quotes, backslashes, `#` comments) and then run *without* a
//!   shell: `sh -c "echo hi >> /tmp/x"` becomes the argv
//!   `["sh", "-c", "echo hi >> /tmp/x"]`, while `echo hi > /tmp/x` passes `>`
//!   to `echo` as an ordinary word. This makes the easy thing (`kcat -P` a
//!   command) do what it looks like, without giving every order a shell.
//!
//! * **JSON** — an object, when the text starts with `{`:
//!
//!   ```json
//!   {"cmd": ["backup", "--full"], "env": {"DEST": "s3://b"}, "timeout_secs": 600,
//!    "id": "backup-2024-05-01"}
//!   {"cmd": ["tar czf /out/x.tgz /data && sync"], "shell": true}
//!   {"image": "alpine:3", "args": ["echo", "hi"]}
//!   {"url": "http://orders.internal/big-order.json"}
//!   ```
//!
//!   Exactly one of `cmd`, `image` and `url` says what to run. A `url` order
//!   is a pointer: the worker fetches the body and parses it with
//!   [`parse_url_body`] (see `fetch::fetch_body`), which refuses a second hop so
//!   that orders cannot chain. Unknown fields are errors rather than being
//!   ignored: a misspelt `timout_secs` should fail loudly, not run the job
//!   with no limit.
//!
//! Validation happens here, once, so that the job runner can trust an
//! [`OrderSpec`]: argv elements and environment entries contain no NUL (exec
//! could not pass them), environment names are names, an image cannot be
//! mistaken for a `docker run` option, and the time limit is in range.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Larger payloads are refused (as an `error` outcome, not a crash).
pub const MAX_ORDER_BYTES: usize = 1024 * 1024;

/// Longest accepted `timeout_secs`: seven days.
pub const MAX_TIMEOUT_SECS: f64 = 7.0 * 24.0 * 3600.0;

/// Longest accepted `id`, in characters.
pub const MAX_ID_CHARS: usize = 256;

/// Longest [`OrderSpec::describe`] line, in characters.
const DESCRIBE_CHARS: usize = 120;

/// What an order runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderKind {
    /// A program and its arguments. With [`OrderSpec::shell`] set, `argv` is
    /// exactly one script for `sh -c`.
    Command { argv: Vec<String> },
    /// A container: `docker run --rm <image> <args...>`.
    Image { image: String, args: Vec<String> },
    /// A pointer to the real order, to be fetched and parsed with
    /// [`parse_url_body`].
    Url { url: String },
}

/// A validated work order.
#[derive(Clone, Debug, PartialEq)]
pub struct OrderSpec {
    pub kind: OrderKind,
    /// Extra environment for the job (on top of the worker's, see `job`).
    pub env: BTreeMap<String, String>,
    /// The order's own time limit; `None` means the pool's default.
    pub timeout: Option<Duration>,
    /// The producer's name for the order, used to detect duplicates.
    pub id: Option<String>,
    /// Run `argv[0]` as a script with `sh -c` (command orders only).
    pub shell: bool,
    /// The W3C trace context the order is part of (`traceparent`, checked by
    /// [`check_traceparent`]): the job gets it as `TRACEPARENT`, and the
    /// order's log lines and completion carry it.
    pub traceparent: Option<String>,
    /// The order this one runs again (`retry_of`, written by `pool_worker
    /// retry`): shown in its completion and its history.
    pub retry_of: Option<crate::record::OrderId>,
    /// Not run before this time (`not_before`, RFC 3339; ms since the UNIX
    /// epoch): docs/protocol.md R54.
    pub not_before: Option<u64>,
    /// At most `KEY_CONCURRENCY` orders of one `key` run at once across
    /// the pool (docs/protocol.md R56).
    pub key: Option<String>,
}

/// Why a payload is not a runnable order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderError {
    /// Null, empty or blank payload (or a command line that is all comment).
    Empty,
    /// The payload's size in bytes, above [`MAX_ORDER_BYTES`].
    TooLarge(usize),
    /// The payload is not UTF-8; the offset of the first bad byte.
    NotUtf8(usize),
    /// A plain-text command line that cannot be split (an unclosed quote).
    CommandLine,
    /// Malformed JSON, an unknown field or a field of the wrong type
    /// (serde's message).
    Json(String),
    /// Well-formed but breaks a rule.
    Invalid(String),
    /// A URL order whose body is again a URL order.
    UrlToUrl,
}

impl fmt::Display for OrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderError::Empty => write!(f, "empty order"),
            OrderError::TooLarge(n) => {
                write!(
                    f,
                    "order is {n} bytes, more than the limit of {MAX_ORDER_BYTES}"
                )
            }
            OrderError::NotUtf8(at) => write!(f, "order is not UTF-8 text (bad byte at {at})"),
            OrderError::CommandLine => write!(f, "unbalanced quotes in command line"),
            OrderError::Json(e) => write!(f, "bad JSON order: {e}"),
            OrderError::Invalid(e) => write!(f, "bad order: {e}"),
            OrderError::UrlToUrl => write!(f, "URL order points to another URL order"),
        }
    }
}

impl std::error::Error for OrderError {}

fn invalid<T>(reason: impl Into<String>) -> Result<T, OrderError> {
    Err(OrderError::Invalid(reason.into()))
}

/// Parses the payload of a message of the orders topic.
pub fn parse(payload: Option<&[u8]>) -> Result<OrderSpec, OrderError> {
    let bytes = payload.ok_or(OrderError::Empty)?;
    if bytes.len() > MAX_ORDER_BYTES {
        return Err(OrderError::TooLarge(bytes.len()));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| OrderError::NotUtf8(e.valid_up_to()))?;
    let text = text.trim();
    if text.is_empty() {
        return Err(OrderError::Empty);
    }
    if text.starts_with('{') {
        parse_json(text)
    } else {
        parse_command_line(text)
    }
}

/// Parses the body fetched for a URL order: like [`parse`], except that the
/// body may not point somewhere else again.
pub fn parse_url_body(body: &[u8]) -> Result<OrderSpec, OrderError> {
    let spec = parse(Some(body))?;
    if matches!(spec.kind, OrderKind::Url { .. }) {
        return Err(OrderError::UrlToUrl);
    }
    Ok(spec)
}

fn parse_command_line(text: &str) -> Result<OrderSpec, OrderError> {
    let argv = shell_words::split(text).map_err(|_| OrderError::CommandLine)?;
    if argv.is_empty() {
        return Err(OrderError::Empty);
    }
    check_argv(&argv)?;
    Ok(OrderSpec::command(argv))
}

/// The JSON form, exactly as written; [`parse_json`] checks the rules that
/// serde cannot express.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOrder {
    cmd: Option<Vec<String>>,
    image: Option<String>,
    args: Option<Vec<String>>,
    url: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    timeout_secs: Option<f64>,
    id: Option<String>,
    #[serde(default)]
    shell: bool,
    traceparent: Option<String>,
    retry_of: Option<String>,
    not_before: Option<String>,
    key: Option<String>,
}

fn parse_json(text: &str) -> Result<OrderSpec, OrderError> {
    let mut raw: JsonOrder =
        serde_json::from_str(text).map_err(|e| OrderError::Json(e.to_string()))?;
    let kind = raw.kind()?;
    check_env(&raw.env)?;
    let timeout = raw.timeout_secs.map(check_timeout).transpose()?;
    if let Some(id) = &raw.id {
        check_id(id)?;
    }
    // A malformed trace context fails the order, like every other
    // malformed field: a producer's bug should be seen, not lose its traces.
    if let Some(t) = &raw.traceparent {
        check_traceparent(t).map_err(OrderError::Invalid)?;
    }
    let retry_of = match &raw.retry_of {
        None => None,
        Some(o) => Some(
            o.parse::<crate::record::OrderId>()
                .map_err(|e| OrderError::Invalid(format!("'retry_of': {e}")))?,
        ),
    };
    let not_before = raw
        .not_before
        .as_deref()
        .map(check_not_before)
        .transpose()?;
    if let Some(k) = &raw.key {
        check_key(k)?;
    }
    Ok(OrderSpec {
        kind,
        env: raw.env,
        timeout,
        id: raw.id,
        shell: raw.shell,
        traceparent: raw.traceparent,
        retry_of,
        not_before,
        key: raw.key,
    })
}

/// `not_before`: an RFC 3339 time (`2026-11-26T18:00:00Z`,
/// `2026-11-26T19:00:00+01:00`), as ms since the UNIX epoch.
pub fn check_not_before(t: &str) -> Result<u64, OrderError> {
    let at = chrono::DateTime::parse_from_rfc3339(t).map_err(|e| {
        OrderError::Invalid(format!(
            "'not_before' {t:?} is not an RFC 3339 time (like 2026-11-26T18:00:00Z): {e}"
        ))
    })?;
    u64::try_from(at.timestamp_millis())
        .map_err(|_| OrderError::Invalid(format!("'not_before' {t:?} is before 1970")))
}

/// `key`: not empty, and at most [`crate::record::MAX_ORDER_KEY_BYTES`] as
/// written in a claims record.
fn check_key(k: &str) -> Result<(), OrderError> {
    if k.is_empty() {
        return invalid("'key' is empty");
    }
    let max = crate::record::MAX_ORDER_KEY_BYTES;
    if crate::record::json_len(k) > max {
        return invalid(format!("'key' is longer than {max} bytes as JSON"));
    }
    Ok(())
}

impl JsonOrder {
    /// What the order runs: exactly one of `cmd`, `image` and `url`, with
    /// the fields that belong to it (taken out of `self`).
    fn kind(&mut self) -> Result<OrderKind, OrderError> {
        if self.args.is_some() && self.image.is_none() {
            return invalid("'args' is only for 'image' orders (put arguments in 'cmd')");
        }
        if self.shell && self.cmd.is_none() {
            return invalid("'shell' is only for 'cmd' orders");
        }
        match (self.cmd.take(), self.image.take(), self.url.take()) {
            (Some(argv), None, None) => {
                if self.shell && argv.len() != 1 {
                    return invalid(
                        "with \"shell\": true, 'cmd' must be exactly one script string",
                    );
                }
                check_argv(&argv)?;
                Ok(OrderKind::Command { argv })
            }
            (None, Some(image), None) => {
                check_image(&image)?;
                let args = self.args.take().unwrap_or_default();
                if args.iter().any(|a| a.contains('\0')) {
                    return invalid("an element of 'args' contains a NUL byte");
                }
                Ok(OrderKind::Image { image, args })
            }
            (None, None, Some(url)) => {
                check_url(&url)?;
                Ok(OrderKind::Url { url })
            }
            (None, None, None) => invalid("the order needs one of 'cmd', 'image' or 'url'"),
            _ => invalid("the order has more than one of 'cmd', 'image' and 'url'"),
        }
    }
}

fn check_env(env: &BTreeMap<String, String>) -> Result<(), OrderError> {
    for (name, value) in env {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return invalid(format!("{name:?} is not an environment variable name"));
        }
        if value.contains('\0') {
            return invalid(format!("environment variable {name} contains a NUL byte"));
        }
    }
    Ok(())
}

fn check_id(id: &str) -> Result<(), OrderError> {
    if id.is_empty() {
        return invalid("'id' is empty");
    }
    if id.chars().count() > MAX_ID_CHARS {
        return invalid(format!("'id' is longer than {MAX_ID_CHARS} characters"));
    }
    Ok(())
}

fn check_argv(argv: &[String]) -> Result<(), OrderError> {
    match argv.first() {
        None => invalid("'cmd' is empty"),
        Some(p) if p.is_empty() => invalid("the program name is empty"),
        Some(_) if argv.iter().any(|a| a.contains('\0')) => {
            invalid("an argument contains a NUL byte")
        }
        Some(_) => Ok(()),
    }
}

fn check_image(image: &str) -> Result<(), OrderError> {
    // `docker run` would read "-v/:/host" as an option, not as an image.
    if image.is_empty() || image.starts_with('-') || image.chars().any(|c| c.is_whitespace()) {
        return invalid(format!("{image:?} is not a container image name"));
    }
    if image.contains('\0') {
        return invalid("'image' contains a NUL byte");
    }
    Ok(())
}

fn check_url(url: &str) -> Result<(), OrderError> {
    let scheme_ok = ["http://", "https://"].iter().any(|s| {
        url.get(..s.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(s))
    });
    if !scheme_ok {
        return invalid("'url' must start with http:// or https://");
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return invalid("'url' contains a space or control character");
    }
    Ok(())
}

/// Checks a W3C trace context header value (`traceparent`, version 00):
/// `00-<trace id: 32 hex>-<parent id: 16 hex>-<flags: 2 hex>`, lower-case,
/// neither id all zeros (the spec's invalid values). Its exact length also
/// bounds what it adds to a record (55 bytes).
pub fn check_traceparent(t: &str) -> Result<(), String> {
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    let parts: Vec<&str> = t.split('-').collect();
    let ok = match parts.as_slice() {
        [v, trace, parent, flags] => {
            *v == "00"
                && hex(trace, 32)
                && hex(parent, 16)
                && hex(flags, 2)
                && !zero(trace)
                && !zero(parent)
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        let shown: String = t.chars().take(64).collect();
        Err(format!(
            "'traceparent' {shown:?} is not a W3C trace context (00-<32 hex>-<16 hex>-<2 hex>, lower case, ids not all zero)"
        ))
    }
}

fn check_timeout(secs: f64) -> Result<Duration, OrderError> {
    // JSON has no NaN or infinity, but the comparisons below reject them anyway,
    // which keeps `from_secs_f64` (it panics on those) safe.
    if !(secs > 0.0 && secs <= MAX_TIMEOUT_SECS) {
        return invalid(format!(
            "'timeout_secs' must be positive and at most {MAX_TIMEOUT_SECS} (7 days), not {secs}"
        ));
    }
    let d = Duration::from_secs_f64(secs);
    if d.is_zero() {
        return invalid(format!("'timeout_secs' {secs} rounds to zero"));
    }
    Ok(d)
}

impl OrderSpec {
    /// A plain command line (`argv`), with nothing else set: what a
    /// plain-text order is.
    pub fn command(argv: Vec<String>) -> OrderSpec {
        OrderSpec {
            kind: OrderKind::Command { argv },
            env: BTreeMap::new(),
            timeout: None,
            id: None,
            shell: false,
            traceparent: None,
            retry_of: None,
            not_before: None,
            key: None,
        }
    }

    /// What the protocol reads of the order before its job starts
    /// (docs/protocol.md R46, R54, R56).
    pub fn terms(&self) -> crate::worker::Terms {
        crate::worker::Terms {
            id: self.id.clone(),
            not_before: self.not_before,
            key: self.key.clone(),
        }
    }

    /// A short one-line description for logs, at most about 120 characters.
    pub fn describe(&self) -> String {
        let what = match &self.kind {
            OrderKind::Command { argv } if self.shell => {
                format!(
                    "sh -c {}",
                    shell_words::quote(argv.first().map_or("", |s| s))
                )
            }
            OrderKind::Command { argv } => shell_words::join(argv),
            OrderKind::Image { image, args } => {
                let mut s = format!("image {image}");
                if !args.is_empty() {
                    s.push(' ');
                    s.push_str(&shell_words::join(args));
                }
                s
            }
            OrderKind::Url { url } => format!("url {url}"),
        };
        let line = match &self.id {
            Some(id) => format!("[{id}] {what}"),
            None => what,
        };
        one_line(&line, DESCRIBE_CHARS)
    }
}

/// `s` with control characters (newlines...) shown as spaces, cut to `max`
/// characters with an ellipsis.
fn one_line(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max + 1)
        .collect();
    if out.chars().count() > max {
        out = out.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(s: &str) -> OrderSpec {
        parse(Some(s.as_bytes())).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    fn err(s: &str) -> OrderError {
        match parse(Some(s.as_bytes())) {
            Ok(spec) => panic!("{s:?} should not parse, got {spec:?}"),
            Err(e) => e,
        }
    }

    fn argv(spec: &OrderSpec) -> Vec<&str> {
        match &spec.kind {
            OrderKind::Command { argv } => argv.iter().map(String::as_str).collect(),
            other => panic!("not a command: {other:?}"),
        }
    }

    #[test]
    fn empty_orders() {
        assert_eq!(parse(None), Err(OrderError::Empty));
        assert_eq!(parse(Some(b"")), Err(OrderError::Empty));
        assert_eq!(err(" \n\t "), OrderError::Empty);
        assert_eq!(err("# only a comment"), OrderError::Empty);
        assert_eq!(OrderError::Empty.to_string(), "empty order");
    }

    #[test]
    fn size_and_encoding() {
        let big = vec![b'a'; MAX_ORDER_BYTES + 1];
        assert_eq!(
            parse(Some(&big)),
            Err(OrderError::TooLarge(MAX_ORDER_BYTES + 1))
        );
        assert!(OrderError::TooLarge(MAX_ORDER_BYTES + 1)
            .to_string()
            .contains("1048577"));
        let mut just_fits = vec![b' '; MAX_ORDER_BYTES];
        just_fits[0] = b'x';
        assert!(parse(Some(&just_fits)).is_ok());
        assert_eq!(parse(Some(b"echo \xff")), Err(OrderError::NotUtf8(5)));
    }

    #[test]
    fn command_lines_split_like_a_shell() {
        assert_eq!(
            argv(&ok(r#"sh -c "echo hi >> /tmp/x""#)),
            ["sh", "-c", "echo hi >> /tmp/x"]
        );
        assert_eq!(argv(&ok(r"echo 'a b' c\ d # note")), ["echo", "a b", "c d"]);
        // No shell: redirections are ordinary words.
        assert_eq!(argv(&ok("  echo hi > x \n")), ["echo", "hi", ">", "x"]);
        let spec = ok("true");
        assert_eq!((spec.shell, spec.id, spec.timeout), (false, None, None));
        assert_eq!(err(r#"echo "unclosed"#), OrderError::CommandLine);
        assert_eq!(err("echo 'unclosed"), OrderError::CommandLine);
        assert!(matches!(err(r#""" arg"#), OrderError::Invalid(_)));
        assert!(matches!(err("echo a\0b"), OrderError::Invalid(_)));
    }

    #[test]
    fn json_commands() {
        let spec = ok(
            r#" {"cmd": ["backup", "--full"], "env": {"A": "1"}, "timeout_secs": 90,
                          "id": "b-1"} "#,
        );
        assert_eq!(argv(&spec), ["backup", "--full"]);
        assert_eq!(spec.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(spec.timeout, Some(Duration::from_secs(90)));
        assert_eq!(spec.id.as_deref(), Some("b-1"));
        assert_eq!(
            ok(r#"{"cmd":["x"],"timeout_secs":0.25}"#).timeout,
            Some(Duration::from_millis(250))
        );

        assert!(matches!(err(r#"{"cmd": []}"#), OrderError::Invalid(_)));
        assert!(matches!(
            err(r#"{"cmd": ["", "x"]}"#),
            OrderError::Invalid(_)
        ));
        assert!(matches!(
            err(r#"{"cmd": ["a\u0000b"]}"#),
            OrderError::Invalid(_)
        ));
        assert!(matches!(
            err(r#"{"cmd": ["x", "a\u0000"]}"#),
            OrderError::Invalid(_)
        ));
        assert!(matches!(
            err(r#"{"cmd": ["x"], "args": ["y"]}"#),
            OrderError::Invalid(_)
        ));
    }

    #[test]
    fn json_shell_orders() {
        let spec = ok(r#"{"cmd": ["echo hi | wc -c"], "shell": true}"#);
        assert!(spec.shell);
        assert_eq!(argv(&spec), ["echo hi | wc -c"]);
        assert!(matches!(
            err(r#"{"cmd": ["echo", "hi"], "shell": true}"#),
            OrderError::Invalid(_)
        ));
        assert!(matches!(
            err(r#"{"image": "alpine", "shell": true}"#),
            OrderError::Invalid(_)
        ));
        assert!(!ok(r#"{"cmd": ["x"], "shell": false}"#).shell);
    }

    #[test]
    fn json_images_and_urls() {
        let spec = ok(r#"{"image": "alpine:3", "args": ["echo", "hi"]}"#);
        assert_eq!(
            spec.kind,
            OrderKind::Image {
                image: "alpine:3".into(),
                args: vec!["echo".into(), "hi".into()]
            }
        );
        assert_eq!(
            ok(r#"{"image": "alpine"}"#).kind,
            OrderKind::Image {
                image: "alpine".into(),
                args: vec![]
            }
        );
        assert!(matches!(
            err(r#"{"image": "--privileged"}"#),
            OrderError::Invalid(_)
        ));
        assert!(matches!(err(r#"{"image": ""}"#), OrderError::Invalid(_)));

        let spec = ok(r#"{"url": "https://example.com/o.json"}"#);
        assert_eq!(
            spec.kind,
            OrderKind::Url {
                url: "https://example.com/o.json".into()
            }
        );
        assert!(matches!(
            ok(r#"{"url": "HTTP://h/x"}"#).kind,
            OrderKind::Url { .. }
        ));
        assert!(matches!(
            err(r#"{"url": "ftp://h/x"}"#),
            OrderError::Invalid(_)
        ));
        assert!(matches!(
            err(r#"{"url": "http://h/a b"}"#),
            OrderError::Invalid(_)
        ));
    }

    #[test]
    fn exactly_one_kind() {
        assert!(matches!(err("{}"), OrderError::Invalid(_)));
        assert!(matches!(
            err(r#"{"cmd": ["x"], "image": "alpine"}"#),
            OrderError::Invalid(_)
        ));
        assert!(matches!(
            err(r#"{"url": "http://h/", "image": "alpine"}"#),
            OrderError::Invalid(_)
        ));
    }

    #[test]
    fn json_types_and_unknown_fields() {
        let e = err(r#"{"cmd": ["x"], "timout_secs": 5}"#);
        assert!(
            matches!(&e, OrderError::Json(m) if m.contains("timout_secs")),
            "{e}"
        );
        let e = err(r#"{"cmd": "echo hi"}"#);
        assert!(
            matches!(&e, OrderError::Json(m) if m.contains("invalid type")),
            "{e}"
        );
        assert!(matches!(
            err(r#"{"cmd": ["x"], "env": {"A": 1}}"#),
            OrderError::Json(_)
        ));
        assert!(matches!(
            err(r#"{"cmd": ["x"], "shell": "yes"}"#),
            OrderError::Json(_)
        ));
        assert!(matches!(err(r#"{"cmd": ["x"]"#), OrderError::Json(_)));
        assert!(matches!(
            err(r#"{"cmd": ["x"], "cmd": ["y"]}"#),
            OrderError::Json(_)
        ));
        assert!(matches!(
            err(r#"{"cmd": ["x"]} trailing"#),
            OrderError::Json(_)
        ));
    }

    #[test]
    fn env_names() {
        assert!(ok(r#"{"cmd": ["x"], "env": {"lower_ok.too": ""}}"#)
            .env
            .contains_key("lower_ok.too"));
        for bad in [r#""""#, r#""A=B""#, r#""A\u0000""#] {
            let order = format!(r#"{{"cmd": ["x"], "env": {{{bad}: "v"}}}}"#);
            assert!(matches!(err(&order), OrderError::Invalid(_)), "{order}");
        }
        assert!(matches!(
            err(r#"{"cmd": ["x"], "env": {"A": "\u0000"}}"#),
            OrderError::Invalid(_)
        ));
    }

    #[test]
    fn timeouts() {
        assert_eq!(
            ok(r#"{"cmd":["x"],"timeout_secs":604800}"#).timeout,
            Some(Duration::from_secs(604800))
        );
        for bad in ["0", "-1", "604800.5", "1e-12", "1e300"] {
            let order = format!(r#"{{"cmd":["x"],"timeout_secs":{bad}}}"#);
            assert!(matches!(err(&order), OrderError::Invalid(_)), "{order}");
        }
        assert!(matches!(
            err(r#"{"cmd":["x"],"timeout_secs":"5"}"#),
            OrderError::Json(_)
        ));
    }

    #[test]
    fn ids() {
        let long = "é".repeat(MAX_ID_CHARS);
        assert_eq!(
            ok(&format!(r#"{{"cmd":["x"],"id":"{long}"}}"#)).id,
            Some(long.clone())
        );
        assert!(matches!(
            err(&format!(r#"{{"cmd":["x"],"id":"{long}x"}}"#)),
            OrderError::Invalid(_)
        ));
        assert!(matches!(
            err(r#"{"cmd":["x"],"id":""}"#),
            OrderError::Invalid(_)
        ));
        assert!(matches!(
            err(r#"{"cmd":["x"],"id":7}"#),
            OrderError::Json(_)
        ));
    }

    #[test]
    fn trace_context_and_retry_of() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let spec = ok(&format!(
            r#"{{"cmd":["x"],"traceparent":"{tp}","retry_of":"2:17"}}"#
        ));
        assert_eq!(spec.traceparent.as_deref(), Some(tp));
        assert_eq!(spec.retry_of, Some(crate::record::OrderId::new(2, 17)));
        let plain = ok(r#"{"cmd":["x"]}"#);
        assert_eq!((plain.traceparent, plain.retry_of), (None, None));
        for bad in [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "",
            "\u{e9}\u{e9}-x",
        ] {
            let order = format!(r#"{{"cmd":["x"],"traceparent":"{bad}"}}"#);
            let e = err(&order);
            assert!(
                matches!(&e, OrderError::Invalid(m) if m.contains("traceparent")),
                "{order}: {e}"
            );
        }
        assert!(matches!(
            err(r#"{"cmd":["x"],"traceparent":5}"#),
            OrderError::Json(_)
        ));
        for bad in ["2", "a:b", "-1:3", ""] {
            let order = format!(r#"{{"cmd":["x"],"retry_of":"{bad}"}}"#);
            assert!(
                matches!(err(&order), OrderError::Invalid(m) if m.contains("retry_of")),
                "{order}"
            );
        }
    }

    #[test]
    fn not_before_is_an_rfc3339_time() {
        let at = |t: &str| ok(&format!(r#"{{"cmd":["x"],"not_before":"{t}"}}"#)).not_before;
        // 2026-11-26T18:00:00Z is 1_795_716_000 s after the epoch.
        assert_eq!(at("2026-11-26T18:00:00Z"), Some(1_795_716_000_000));
        assert_eq!(at("2026-11-26T18:00:00.250Z"), Some(1_795_716_000_250));
        // The same instant written with offsets, and a lower-case separator.
        assert_eq!(at("2026-11-26T19:00:00+01:00"), Some(1_795_716_000_000));
        assert_eq!(at("2026-11-26T12:30:00-05:30"), Some(1_795_716_000_000));
        assert_eq!(at("2026-11-26t18:00:00z"), Some(1_795_716_000_000));
        assert_eq!(at("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(ok(r#"{"cmd":["x"]}"#).not_before, None);
        assert_eq!(check_not_before("1970-01-01T01:00:00+01:00"), Ok(0));
    }

    #[test]
    fn not_before_refuses_garbage_and_times_before_1970() {
        for bad in [
            "tomorrow",
            "",
            "2026-11-26",
            "2026-11-26T18:00:00",
            "2026-11-26 18:00",
            "2026-13-01T00:00:00Z",
            "1795716000000",
        ] {
            let order = format!(r#"{{"cmd":["x"],"not_before":"{bad}"}}"#);
            match err(&order) {
                OrderError::Invalid(m) => assert!(
                    m.contains("'not_before'") && m.contains("is not an RFC 3339 time"),
                    "{order}: {m}"
                ),
                other => panic!("{order}: {other:?}"),
            }
        }
        // A number, not a string: the JSON is not an order's shape.
        assert!(parse(Some(br#"{"cmd":["x"],"not_before":17}"#)).is_err());
        for early in ["1969-12-31T23:59:59Z", "1970-01-01T00:59:59+01:00"] {
            let order = format!(r#"{{"cmd":["x"],"not_before":"{early}"}}"#);
            assert_eq!(
                err(&order),
                OrderError::Invalid(format!("'not_before' {early:?} is before 1970")),
            );
        }
    }

    #[test]
    fn keys_are_not_empty_and_fit_a_record() {
        let order = |k: &str| format!(r#"{{"cmd":["x"],"key":{}}}"#, serde_json::json!(k));
        assert_eq!(ok(&order("a")).key.as_deref(), Some("a"));
        assert_eq!(ok(r#"{"cmd":["x"]}"#).key, None);
        let just_fits = "k".repeat(crate::record::MAX_ORDER_KEY_BYTES);
        assert_eq!(ok(&order(&just_fits)).key, Some(just_fits.clone()));
        let too_long = "k".repeat(crate::record::MAX_ORDER_KEY_BYTES + 1);
        assert_eq!(
            err(&order(&too_long)),
            OrderError::Invalid("'key' is longer than 256 bytes as JSON".into())
        );
        // Counted as written in a record: 255 bytes and one quote (2 as
        // JSON) do not fit; multi-byte characters count their bytes.
        let escaped = format!("{}\"", "k".repeat(255));
        assert!(matches!(err(&order(&escaped)), OrderError::Invalid(m) if m.contains("'key'")));
        let wide = "é".repeat(128);
        assert_eq!(ok(&order(&wide)).key, Some(wide));
        let too_wide = format!("{}k", "é".repeat(128));
        assert!(matches!(err(&order(&too_wide)), OrderError::Invalid(m) if m.contains("'key'")));
        assert_eq!(
            err(&order("")),
            OrderError::Invalid("'key' is empty".into())
        );
    }

    #[test]
    fn terms_carry_id_not_before_and_key() {
        let spec = ok(r#"{"cmd":["x"],"id":"i","not_before":"1970-01-01T00:00:01Z","key":"k"}"#);
        let t = spec.terms();
        assert_eq!(
            (t.id.as_deref(), t.not_before, t.key.as_deref()),
            (Some("i"), Some(1000), Some("k"))
        );
        assert!(t.any());
        assert!(!ok(r#"{"cmd":["x"]}"#).terms().any());
        assert!(ok(r#"{"cmd":["x"],"key":"k"}"#).terms().any());
        assert!(ok(r#"{"cmd":["x"],"not_before":"1970-01-01T00:00:00Z"}"#)
            .terms()
            .any());
    }

    #[test]
    fn url_bodies() {
        assert_eq!(argv(&parse_url_body(b"echo hi").unwrap()), ["echo", "hi"]);
        assert!(parse_url_body(br#"{"image":"alpine"}"#).is_ok());
        let e = parse_url_body(br#"{"url":"http://h/again"}"#).unwrap_err();
        assert_eq!(e.to_string(), "URL order points to another URL order");
        assert_eq!(parse_url_body(b"  "), Err(OrderError::Empty));
    }

    #[test]
    fn descriptions() {
        assert_eq!(ok(r#"sh -c "echo hi""#).describe(), "sh -c 'echo hi'");
        assert_eq!(
            ok(r#"{"cmd":["a|b"],"shell":true,"id":"j1"}"#).describe(),
            "[j1] sh -c 'a|b'"
        );
        assert_eq!(
            ok(r#"{"image":"alpine","args":["ls"]}"#).describe(),
            "image alpine ls"
        );
        assert_eq!(ok(r#"{"url":"http://h/o"}"#).describe(), "url http://h/o");
        let long = ok(&format!("echo {}\nsecond", "x".repeat(300))).describe();
        assert_eq!(long.chars().count(), 120);
        assert!(long.ends_with('…') && !long.contains('\n'));
        let multi = ok(r#"{"cmd":["line1\nline2"],"shell":true}"#).describe();
        assert!(!multi.contains('\n'), "{multi}");
    }

    proptest! {
        #[test]
        fn never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse(Some(&bytes));
            let _ = parse_url_body(&bytes);
        }

        #[test]
        fn never_panics_on_json_like_text(tail in "\\PC*", s in r#"\{("(cmd|image|url|args|env|timeout_secs|id|shell)"|[\[\]{}:,"0-9.eE+-]|true|null| )*"#) {
            let _ = parse(Some(format!("{{{tail}").as_bytes())).map(|o| o.describe());
            let _ = parse(Some(s.as_bytes())).map(|o| o.describe());
        }

        #[test]
        fn valid_commands_round_trip(args in proptest::collection::vec("[^\0\\s{]([^\0]{0,18}[^\0\\s])?", 1..6)) {
            // (No blanks at the ends, which `parse` trims, and no leading `{`,
            // which would make the order JSON.)
            let spec = parse(Some(shell_words::join(&args).as_bytes())).unwrap();
            prop_assert_eq!(spec.kind, OrderKind::Command { argv: args });
        }
    }
}
