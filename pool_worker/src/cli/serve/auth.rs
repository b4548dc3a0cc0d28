//! Who may act from `serve`'s page (issue 36, 5): the token, the session
//! cookie made from it, the CSRF token tied to the session, and the check
//! of where a request comes from. Decisions only (no HTTP plumbing: that is
//! `actions.rs`), so that each is tested on its own.
//!
//! * The token (`SERVE_TOKEN`, or `SERVE_TOKEN_FILE`: one of them) is a
//!   secret of at least [`MIN_TOKEN_BYTES`] bytes. A token file must be a
//!   regular file that neither group nor others may read or write (`chmod
//!   600`), as `STATE_DIR` must be this user's alone.
//! * Logging in (pasting the token) gives a session cookie
//!   `ISSUED.NONCE.MAC`: when it was made, 16 random bytes, and
//!   HMAC-SHA256 of both keyed with the token. The cookie is not the token
//!   and tells nothing of it; it lasts [`SESSION_MS`]; a new token (a
//!   rotation) ends every session at once. No state is kept: a restart of
//!   `serve` keeps the sessions.
//! * Each form carries a CSRF token: HMAC of the session's cookie keyed
//!   with the token (a synchronizer token that needs no store). Another
//!   site can make a browser send the cookie (not with SameSite=Strict, but
//!   still), never read the page, so it cannot know the CSRF token.
//! * Requests whose `Origin` (or, without one, `Referer`) names another
//!   host than the request's `Host`, or whose `Sec-Fetch-Site` says
//!   cross-site, are refused before anything else.
//!
//! Every comparison of a secret is in constant time (`subtle`, and
//! `hmac`'s `verify_slice`).

use crate::env::ConfigError;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The shortest token accepted, in bytes (`openssl rand -base64 32` makes 44).
pub(crate) const MIN_TOKEN_BYTES: usize = 32;
/// The longest: a token is pasted into a form.
pub(crate) const MAX_TOKEN_BYTES: usize = 1024;
/// How long a session lasts (the cookie's Max-Age as well).
pub(crate) const SESSION_MS: u64 = 12 * 3600 * 1000;
/// The session cookie's name.
pub(crate) const SESSION_COOKIE: &str = "pw_session";
/// The one-message cookie (redirect after POST): what an action did.
pub(crate) const FLASH_COOKIE: &str = "pw_flash";

/// The operator's token: the key of every MAC here. Its `Debug` shows
/// nothing of it.
pub(crate) struct Auth {
    token: Vec<u8>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth(..)")
    }
}

/// One logged-in browser: when its cookie was made and its nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    issued_ms: u64,
    nonce: [u8; 16],
}

impl Session {
    /// A short name for the logs ("who"): the nonce's first 8 hex digits.
    pub(crate) fn id(&self) -> String {
        hex(&self.nonce[..4])
    }
}

/// A message for the next page (the result of an action).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Flash {
    pub(crate) ok: bool,
    pub(crate) text: String,
}

impl Auth {
    /// The token from `SERVE_TOKEN` (`value`) or `SERVE_TOKEN_FILE`
    /// (`file`, a path): `None` when neither is set (the page stays
    /// read-only); an error when both are, or when the token or its file
    /// is not fit (the words name the variable, never the token).
    pub(crate) fn from_sources(
        value: Option<&str>,
        file: Option<&str>,
    ) -> Result<Option<Auth>, ConfigError> {
        let value = value.filter(|v| !v.is_empty());
        let file = file.map(str::trim).filter(|f| !f.is_empty());
        let (token, var) = match (value, file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError(
                    "SERVE_TOKEN and SERVE_TOKEN_FILE are both set; set one".into(),
                ))
            }
            (None, None) => return Ok(None),
            (Some(v), None) => (v.as_bytes().to_vec(), "SERVE_TOKEN".to_string()),
            (None, Some(path)) => (
                read_token_file(std::path::Path::new(path))?,
                format!("SERVE_TOKEN_FILE: the token in {path}"),
            ),
        };
        Auth::new(token)
            .map(Some)
            .map_err(|e| ConfigError(format!("{var} {e}")))
    }

    /// `token`, trimmed of the white space around it (a file's final
    /// newline), if it is one: [`MIN_TOKEN_BYTES`] to [`MAX_TOKEN_BYTES`]
    /// bytes of text without control characters (it is pasted into a form).
    pub(crate) fn new(token: Vec<u8>) -> Result<Auth, String> {
        let text = std::str::from_utf8(&token).map_err(|_| "is not UTF-8 text".to_string())?;
        let t = text.trim();
        if t.len() < MIN_TOKEN_BYTES {
            return Err(format!(
                "is too short ({} bytes; at least {MIN_TOKEN_BYTES}: `openssl rand -base64 32`)",
                t.len()
            ));
        }
        if t.len() > MAX_TOKEN_BYTES {
            return Err(format!("is too long (at most {MAX_TOKEN_BYTES} bytes)"));
        }
        if t.chars().any(char::is_control) {
            return Err("has control characters".into());
        }
        Ok(Auth {
            token: t.as_bytes().to_vec(),
        })
    }

    fn mac(&self, purpose: &str, parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.token)
            .expect("HMAC accepts any key length");
        m.update(b"pool_worker serve ");
        m.update(purpose.as_bytes());
        for p in parts {
            // Each part's length first: no two lists of parts run together.
            m.update(&(p.len() as u64).to_be_bytes());
            m.update(p);
        }
        m
    }

    fn tag(&self, purpose: &str, parts: &[&[u8]]) -> String {
        hex(&self.mac(purpose, parts).finalize().into_bytes())
    }

    fn verify(&self, purpose: &str, parts: &[&[u8]], tag_hex: &str) -> bool {
        match unhex(tag_hex) {
            Some(tag) => self.mac(purpose, parts).verify_slice(&tag).is_ok(),
            None => false,
        }
    }

    /// Whether `candidate` (what was pasted into the login form, trimmed)
    /// is the token: both hashed, the hashes compared in constant time
    /// (so neither the token's bytes nor its length leak through timing).
    pub(crate) fn token_matches(&self, candidate: &str) -> bool {
        let a = Sha256::digest(candidate.trim().as_bytes());
        let b = Sha256::digest(&self.token);
        a.ct_eq(&b).into()
    }

    /// A new session, made at `now_ms`.
    pub(crate) fn new_session(&self, now_ms: u64) -> anyhow::Result<Session> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)
            .map_err(|e| anyhow::anyhow!("no random bytes for a session: {e}"))?;
        Ok(Session {
            issued_ms: now_ms,
            nonce,
        })
    }

    /// The session cookie's value: `ISSUED.NONCE.MAC`.
    pub(crate) fn session_cookie(&self, s: &Session) -> String {
        let issued = s.issued_ms.to_string();
        let tag = self.tag("session", &[issued.as_bytes(), &s.nonce]);
        format!("{issued}.{}.{tag}", hex(&s.nonce))
    }

    /// The session a cookie's value names, if this token made it and it
    /// has not expired at `now_ms` (nor was made more than a minute after it).
    pub(crate) fn session(&self, cookie: &str, now_ms: u64) -> Option<Session> {
        let mut it = cookie.split('.');
        let (issued, nonce, tag) = (it.next()?, it.next()?, it.next()?);
        if it.next().is_some() {
            return None;
        }
        let nonce: [u8; 16] = unhex(nonce)?.try_into().ok()?;
        if !self.verify("session", &[issued.as_bytes(), &nonce], tag) {
            return None;
        }
        let issued_ms: u64 = issued.parse().ok()?;
        let fresh = now_ms.saturating_sub(issued_ms) < SESSION_MS && issued_ms <= now_ms + 60_000;
        fresh.then_some(Session { issued_ms, nonce })
    }

    /// The CSRF token of the forms shown to session `s`.
    pub(crate) fn csrf(&self, s: &Session) -> String {
        let issued = s.issued_ms.to_string();
        self.tag("csrf", &[issued.as_bytes(), &s.nonce])
    }

    /// Whether `given` (a form's `csrf` field) is session `s`'s CSRF token
    /// (compared in constant time).
    pub(crate) fn csrf_ok(&self, s: &Session, given: &str) -> bool {
        let issued = s.issued_ms.to_string();
        self.verify("csrf", &[issued.as_bytes(), &s.nonce], given)
    }

    /// The flash cookie's value for `f`: only this server can make one, so
    /// the page never shows a message another site set.
    pub(crate) fn flash_cookie(&self, f: &Flash) -> String {
        let kind = if f.ok { "ok" } else { "err" };
        let text = clip(&f.text, 600);
        let tag = self.tag("flash", &[kind.as_bytes(), text.as_bytes()]);
        format!("{kind}.{}.{tag}", hex(text.as_bytes()))
    }

    /// The message a flash cookie's value carries, if this server made it.
    pub(crate) fn flash(&self, cookie: &str) -> Option<Flash> {
        let mut it = cookie.split('.');
        let (kind, text, tag) = (it.next()?, it.next()?, it.next()?);
        let text = String::from_utf8(unhex(text)?).ok()?;
        if it.next().is_some() || !self.verify("flash", &[kind.as_bytes(), text.as_bytes()], tag) {
            return None;
        }
        Some(Flash {
            ok: kind == "ok",
            text,
        })
    }
}

/// At most `n` bytes of `s`, cut at a character boundary.
fn clip(s: &str, n: usize) -> &str {
    let mut end = s.len().min(n);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Reads a token file: a regular file (a symbolic link to one is
/// followed, as a Kubernetes secret is mounted) that neither group nor
/// others may read or write, of a token's size. Opened without blocking,
/// so that a FIFO there cannot hang `serve`.
fn read_token_file(path: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
    use std::io::Read;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let name = path.display();
    let err = |what: String| ConfigError(format!("SERVE_TOKEN_FILE: {what}"));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| err(format!("cannot read {name}: {e}")))?;
    let md = file
        .metadata()
        .map_err(|e| err(format!("cannot read {name}: {e}")))?;
    if !md.is_file() {
        return Err(err(format!("{name} is not a regular file")));
    }
    let mode = md.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(err(format!(
            "{name} may be read or written by group or others (mode {:o}); `chmod 600` it",
            mode & 0o7777
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_BYTES as u64 + 64)
        .read_to_end(&mut bytes)
        .map_err(|e| err(format!("cannot read {name}: {e}")))?;
    Ok(bytes)
}

/// Whether a state-changing request comes from this server's own page, by
/// the headers a browser sets: `Sec-Fetch-Site` (refused unless
/// same-origin, or none: typed by the person), then `Origin`, or without
/// one `Referer`, whose host and port must be the request's `Host` (the
/// scheme is not compared: behind a proxy that ends TLS the page is https
/// and serve's socket plain HTTP; the proxy must pass `Host` on). A
/// request with none of them (curl, a script) passes here: the session
/// and the CSRF token still decide. `Err`: why, for the log.
pub(crate) fn same_origin(h: &axum::http::HeaderMap) -> Result<(), String> {
    use axum::http::header;
    let get = |name| {
        h.get(name)
            .map(|v: &axum::http::HeaderValue| v.to_str().unwrap_or("\u{fffd}"))
    };
    if let Some(site) = get(header::HeaderName::from_static("sec-fetch-site")) {
        if site != "same-origin" && site != "none" {
            return Err(format!("Sec-Fetch-Site is {site:?}"));
        }
    }
    let (which, from) = match (get(header::ORIGIN), get(header::REFERER)) {
        (Some(o), _) => ("Origin", o),
        (None, Some(r)) => ("Referer", r),
        (None, None) => return Ok(()),
    };
    let Some(host) = get(header::HOST) else {
        return Err(format!("{which} {from:?} but no Host"));
    };
    let url = url::Url::parse(from).map_err(|_| format!("{which} {from:?} is not a URL"))?;
    // The Host header read with the Origin's scheme, for its default port.
    let own = url::Url::parse(&format!("{}://{host}", url.scheme()))
        .map_err(|_| format!("Host {host:?} is not a host"))?;
    let same = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some()
        && url.host_str() == own.host_str()
        && url.port_or_known_default() == own.port_or_known_default()
        && own.path() == "/";
    if same {
        Ok(())
    } else {
        Err(format!("{which} {from:?} is not this server ({host:?})"))
    }
}

/// Whether the page was reached over HTTPS (through a proxy that ends
/// TLS), by the login request's `Origin`: the session cookie is then
/// `Secure`.
pub(crate) fn over_https(h: &axum::http::HeaderMap) -> bool {
    h.get(axum::http::header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|o| o.starts_with("https://"))
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub(crate) fn cookie<'a>(h: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    h.get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().trim_matches('"'))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    const TOKEN: &str = "0123456789abcdef0123456789abcdef-token";

    fn auth() -> Auth {
        Auth::new(TOKEN.into()).unwrap()
    }

    #[test]
    fn a_token_is_one_variable_long_enough() {
        assert!(Auth::from_sources(None, None).unwrap().is_none());
        assert!(Auth::from_sources(Some(""), Some(" ")).unwrap().is_none());
        let e = Auth::from_sources(Some(TOKEN), Some("/t")).unwrap_err().0;
        assert!(e.contains("both set"), "{e}");
        let e = Auth::from_sources(Some("tiny-secret"), None).unwrap_err().0;
        assert!(e.starts_with("SERVE_TOKEN is too short (11 bytes"), "{e}");
        assert!(
            !e.contains("tiny-secret"),
            "the token is never repeated: {e}"
        );
        assert!(Auth::new(format!("{TOKEN}\x07").into_bytes()).is_err());
        assert!(Auth::new(vec![0xff; 40]).is_err());
        // A file's newline is not part of it.
        let a = Auth::new(format!("  {TOKEN}\n").into_bytes()).unwrap();
        assert!(a.token_matches(TOKEN) && a.token_matches(&format!("{TOKEN}\n")));
        assert!(!a.token_matches(&TOKEN[1..]) && !a.token_matches(""));
        assert!(!a.token_matches(&format!("{TOKEN}x")));
    }

    #[test]
    fn a_token_file_must_be_a_private_regular_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, format!("{TOKEN}\n")).unwrap();
        let path = f.to_str().unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = Auth::from_sources(None, Some(path)).unwrap_err().0;
            assert!(
                e.starts_with("SERVE_TOKEN_FILE: ") && e.contains("chmod 600"),
                "{mode:o}: {e}"
            );
        }
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let a = Auth::from_sources(None, Some(path)).unwrap().unwrap();
        assert!(a.token_matches(TOKEN));
        // A symbolic link to it is followed.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(Auth::from_sources(None, link.to_str()).unwrap().is_some());
        // A directory, a FIFO, a missing file: refused, at once.
        let e = Auth::from_sources(None, dir.path().to_str()).unwrap_err().0;
        assert!(e.contains("is not a regular file"), "{e}");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = Auth::from_sources(None, fifo.to_str()).unwrap_err().0;
        assert!(e.contains("is not a regular file"), "{e}");
        let e = Auth::from_sources(None, Some("/nonexistent/token"))
            .unwrap_err()
            .0;
        assert!(
            e.starts_with("SERVE_TOKEN_FILE: cannot read /nonexistent/token"),
            "{e}"
        );
        // Too short in a file: said so, with the file's name.
        std::fs::write(&f, "short\n").unwrap();
        let e = Auth::from_sources(None, Some(path)).unwrap_err().0;
        assert!(
            e.contains(&format!("the token in {path} is too short")),
            "{e}"
        );
    }

    #[test]
    fn a_session_cookie_is_made_by_the_token_and_expires() {
        let a = auth();
        let s = a.new_session(1_000_000).unwrap();
        let c = a.session_cookie(&s);
        assert!(
            !c.contains(TOKEN) && !c.contains(&hex(TOKEN.as_bytes())),
            "{c}"
        );
        assert_eq!(a.session(&c, 1_000_000), Some(s.clone()));
        assert_eq!(a.session(&c, 1_000_000 + SESSION_MS - 1), Some(s.clone()));
        assert_eq!(a.session(&c, 1_000_000 + SESSION_MS), None, "expired");
        assert_eq!(a.session(&c, 900_000), None, "made in the future");
        // Another token (a rotation) knows none of the old sessions.
        let b = Auth::new(format!("{TOKEN}-rotated").into_bytes()).unwrap();
        assert_eq!(b.session(&c, 1_000_000), None);
        // Tampered: a later issue time, another nonce, a cut MAC, junk.
        let parts: Vec<&str> = c.split('.').collect();
        let later = format!("{}.{}.{}", 2_000_000, parts[1], parts[2]);
        let other = format!("{}.{}.{}", parts[0], "00".repeat(16), parts[2]);
        let cut = format!("{}.{}.{}", parts[0], parts[1], &parts[2][..62]);
        for bad in [&later, &other, &cut, "", "..", "1.2.3.4", &format!("{c}.x")] {
            assert_eq!(a.session(bad, 1_000_000), None, "{bad}");
        }
        // Two logins: two sessions, each its own CSRF token.
        let s2 = a.new_session(1_000_000).unwrap();
        assert_ne!(s.id(), s2.id());
        assert_ne!(a.csrf(&s), a.csrf(&s2));
    }

    #[test]
    fn the_csrf_token_is_the_sessions_own() {
        let a = auth();
        let s = a.new_session(5).unwrap();
        let t = a.csrf(&s);
        assert!(a.csrf_ok(&s, &t));
        let other = a.new_session(5).unwrap();
        assert!(!a.csrf_ok(&other, &t), "another session's");
        assert!(!a.csrf_ok(&s, ""), "none");
        assert!(!a.csrf_ok(&s, &t[..t.len() - 2]), "cut");
        // One character changed (the last, to another hex digit): a
        // copy that could come out the same (an uppercased token with no
        // letter to change) would make this test fail by chance.
        let mut changed = t.clone();
        let last = changed.pop().unwrap();
        changed.push(if last == '0' { '1' } else { '0' });
        assert!(!a.csrf_ok(&s, &changed), "changed");
        let b = Auth::new(format!("{TOKEN}-rotated").into_bytes()).unwrap();
        assert!(!b.csrf_ok(&s, &t), "another token's");
        // Neither the cookie nor the CSRF token is the other.
        assert!(!a.csrf_ok(&s, &a.session_cookie(&s)));
    }

    #[test]
    fn a_flash_is_only_this_servers() {
        let a = auth();
        let f = Flash {
            ok: false,
            text: "order 0:1: <b>no</b>; \"x\"".into(),
        };
        let c = a.flash_cookie(&f);
        assert!(
            !c.contains(';') && !c.contains(' ') && !c.contains('"'),
            "{c}"
        );
        assert_eq!(a.flash(&c), Some(f));
        let forged = c.replacen("err", "ok", 1);
        assert_eq!(a.flash(&forged), None);
        let long = a.flash_cookie(&Flash {
            ok: true,
            text: "é".repeat(1000),
        });
        assert_eq!(a.flash(&long).unwrap().text.len(), 600);
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn only_this_servers_pages_may_post() {
        let host = ("host", "127.0.0.1:9095");
        for ok in [
            vec![host],
            vec![host, ("origin", "http://127.0.0.1:9095")],
            vec![host, ("referer", "http://127.0.0.1:9095/order/0:1")],
            vec![
                host,
                ("sec-fetch-site", "same-origin"),
                ("origin", "http://127.0.0.1:9095"),
            ],
            vec![("host", "pool.example"), ("origin", "https://pool.example")],
            vec![
                ("host", "pool.example:443"),
                ("origin", "https://pool.example"),
            ],
        ] {
            assert_eq!(same_origin(&headers(&ok)), Ok(()), "{ok:?}");
        }
        for bad in [
            vec![host, ("origin", "http://evil.example")],
            vec![host, ("origin", "http://127.0.0.1:9096")],
            vec![host, ("origin", "null")],
            vec![host, ("referer", "http://evil.example/127.0.0.1:9095")],
            vec![host, ("sec-fetch-site", "cross-site")],
            vec![
                host,
                ("sec-fetch-site", "same-site"),
                ("origin", "http://127.0.0.1:9095"),
            ],
            vec![("origin", "http://127.0.0.1:9095")],
            vec![
                ("host", "127.0.0.1:9095/x"),
                ("origin", "http://127.0.0.1:9095"),
            ],
            vec![host, ("origin", "file:///tmp/x.html")],
        ] {
            assert!(same_origin(&headers(&bad)).is_err(), "{bad:?}");
        }
        assert!(over_https(&headers(&[("origin", "https://pool.example")])));
        assert!(!over_https(&headers(&[("origin", "http://pool.example")])));
    }

    #[test]
    fn cookies_are_found_by_name() {
        let h = headers(&[
            ("cookie", "a=1; pw_session=x.y.z"),
            ("cookie", "pw_flash=\"f\""),
        ]);
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("x.y.z"));
        assert_eq!(cookie(&h, FLASH_COOKIE), Some("f"));
        assert_eq!(cookie(&h, "pw"), None);
    }
}
