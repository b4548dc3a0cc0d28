//! The allow lists: what an order may run, set, pull and fetch.
//!
//! Anyone who can write to the orders topic is an attacker until these lists
//! say otherwise (docs/deploy.md, "Security"). Each list is checked before
//! anything of the order happens, and an order that crosses one is answered
//! `refused` with a reason that names the list, never run and never dropped.
//!
//! * **Environment** ([`check_env`]). An order's `env` must not change how
//!   the allowed program is loaded or interpreted. A fixed list ([`ENV_FLOOR`]:
//!   the dynamic loader's `LD_*`, shell start-up variables, `PATH`, the
//!   interpreters' hooks, `DOCKER_*`, proxies, ...) is refused whatever the
//!   operator configured. On top of it `ORDER_ENV_ALLOW` is an allow list
//!   (names, or prefixes written `PREFIX*`): a deny list can never be
//!   complete (every program reads variables of its own, `GIT_SSH_COMMAND`,
//!   `LESSOPEN`, ...), so only the operator, who knows the programs, can
//!   name what is safe. Unset, every name outside the floor is allowed, and
//!   the worker warns when `ALLOWED_COMMANDS` is set without it.
//!
//! * **Commands** ([`Commands`]). Resolved once, when the worker starts: a
//!   name entry (`echo`) becomes the absolute path found through the worker's
//!   own `PATH`, and an order naming `echo` runs exactly that file. A program
//!   written with a `/` is canonicalized (symlinks, `.`, `..`) and must lie
//!   under a path entry (compared on whole path segments, the entry
//!   canonicalized too) or be the very file a name entry resolved to. A copy
//!   of `sh` called `./cp` therefore matches nothing.
//!
//! * **Images** ([`image_allowed`]): `ALLOWED_IMAGES`; unset, image orders
//!   are refused. Allowing images does not allow `docker` as a command.
//!
//! * **URLs** ([`UrlRule`]): `ALLOWED_URLS` entries are parsed like the
//!   URLs they match, and compared on their parts: scheme, host and port
//!   exactly, the path on whole segments.

use crate::env::ConfigError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why an allow list refuses an order: the reason of its `refused`
/// completion (the message names the list).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The order's `env` sets a variable of the fixed floor.
    #[error("the order sets {name}, which changes how programs are loaded or run; orders may never set it")]
    EnvNever { name: String },
    /// The order's `env` sets a variable `ORDER_ENV_ALLOW` does not name.
    #[error("the order sets {name}, which ORDER_ENV_ALLOW does not allow")]
    EnvNotAllowed { name: String },
    /// The program is not allowed by `ALLOWED_COMMANDS`.
    #[error("program '{program}' is not in the allowed commands")]
    Command { program: String },
    /// An image order, and `ALLOWED_IMAGES` is not set.
    #[error("image '{image}' refused: image orders are off (ALLOWED_IMAGES is not set)")]
    ImagesOff { image: String },
    /// The image is not allowed by `ALLOWED_IMAGES`.
    #[error("image '{image}' is not in ALLOWED_IMAGES")]
    Image { image: String },
    /// A URL order's URL carries credentials.
    #[error("URL {url} has credentials, which URL orders may not carry")]
    UrlCredentials { url: String },
    /// The URL is not under `ALLOWED_URLS`.
    #[error("URL {url} is not under an allowed prefix (ALLOWED_URLS)")]
    Url { url: String },
}

// ---------------------------------------------------------------------------
// Environment.

/// Variables an order may never set, whatever `ORDER_ENV_ALLOW` says: they
/// change how a program is loaded or interpreted, or where its traffic goes.
/// An entry ending in `*` is a prefix.
pub const ENV_FLOOR: &[&str] = &[
    // The dynamic loader and the C library.
    "LD_*",
    "GCONV_PATH",
    "GLIBC_TUNABLES",
    "LOCPATH",
    "NLSPATH",
    "HOSTALIASES",
    "RES_OPTIONS",
    "LOCALDOMAIN",
    "MALLOC_*",
    // Shells.
    "PATH",
    "BASH_ENV",
    "ENV",
    "BASH_FUNC_*",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "IFS",
    "CDPATH",
    "GLOBIGNORE",
    "PROMPT_COMMAND",
    "BASH_XTRACEFD",
    // Interpreters and runtimes.
    "PYTHON*",
    "PERL5*",
    "PERLLIB",
    "PERL_*",
    "RUBY*",
    "GEM_*",
    "NODE_*",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "LUA_*",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "TCLLIBPATH",
    "GIT_*",
    "LESSOPEN",
    "LESSCLOSE",
    // TLS libraries (engines are code) and proxies (where traffic goes).
    "OPENSSL_*",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    // The docker CLI (image orders): which daemon, which config.
    "DOCKER_*",
];

/// Refused for image orders too: the order's variables are in the docker
/// CLI's environment (`-e NAME` copies them from there), and the CLI reads
/// its configuration, credential helpers included, from `$HOME/.docker`.
const IMAGE_ENV_FLOOR: &[&str] = &["HOME", "XDG_*"];

/// Whether `name` matches a pattern list (exact names, or `PREFIX*`).
pub fn matches_any(name: &str, patterns: &[impl AsRef<str>]) -> bool {
    patterns.iter().any(|p| {
        let p = p.as_ref();
        match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
        }
    })
}

/// Why an order may not set `name`, if it may not. `allow` is
/// `ORDER_ENV_ALLOW` (`None`: everything outside the floor).
pub fn env_refusal(name: &str, allow: &Option<Vec<String>>, image: bool) -> Option<Refusal> {
    let name = name.to_string();
    if matches_any(&name, ENV_FLOOR) || (image && matches_any(&name, IMAGE_ENV_FLOOR)) {
        return Some(Refusal::EnvNever { name });
    }
    match allow {
        Some(allow) if !matches_any(&name, allow) => Some(Refusal::EnvNotAllowed { name }),
        _ => None,
    }
}

/// The order's environment against the rules: the first refusal, if any.
pub fn check_env(
    env: &BTreeMap<String, String>,
    allow: &Option<Vec<String>>,
    image: bool,
) -> Result<(), Refusal> {
    match env.keys().find_map(|k| env_refusal(k, allow, image)) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// `ORDER_ENV_ALLOW` as configured: an entry that names a floor variable
/// could never take effect, so it is a configuration error, not a surprise.
pub fn parse_env_allow(list: Option<Vec<String>>) -> Result<Option<Vec<String>>, ConfigError> {
    if let Some(l) = &list {
        for e in l {
            if !e.ends_with('*') && matches_any(e, ENV_FLOOR) {
                return Err(ConfigError(format!("ORDER_ENV_ALLOW names {e}, which orders may never set (see docs/deploy.md, \"Security\")")));
            }
        }
    }
    Ok(list)
}

// ---------------------------------------------------------------------------
// Commands.

/// Programs that, allowed, allow everything: they run other programs or
/// code given in their arguments. Named in a start-up warning.
pub const RUNS_ANYTHING: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "fish",
    "csh",
    "tcsh",
    "busybox",
    "env",
    "find",
    "xargs",
    "nohup",
    "nice",
    "ionice",
    "timeout",
    "stdbuf",
    "setsid",
    "chroot",
    "unshare",
    "nsenter",
    "sudo",
    "su",
    "doas",
    "runuser",
    "python",
    "python2",
    "python3",
    "perl",
    "ruby",
    "node",
    "nodejs",
    "deno",
    "php",
    "lua",
    "tclsh",
    "wish",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "sed",
    "make",
    "git",
    "tar",
    "rsync",
    "ssh",
    "vi",
    "vim",
    "less",
    "man",
    "strace",
    "gdb",
    "docker",
    "podman",
    "kubectl",
    "systemd-run",
    "java",
    "R",
    "Rscript",
];

/// `ALLOWED_COMMANDS`, resolved when the worker starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Commands {
    /// Name entries: the absolute path found through the worker's `PATH`.
    pub names: BTreeMap<String, PathBuf>,
    /// The canonical forms of those paths (a `/` program may name them).
    pub name_files: Vec<PathBuf>,
    /// Path entries, canonicalized (as written when they do not exist).
    pub prefixes: Vec<PathBuf>,
    /// Name entries not found in `PATH`: they allow nothing.
    pub missing: Vec<String>,
}

impl Commands {
    /// Resolves the entries of `ALLOWED_COMMANDS` with the given `PATH`.
    /// A path entry must be absolute.
    pub fn resolve(
        entries: &[String],
        path_var: Option<&std::ffi::OsStr>,
    ) -> Result<Commands, ConfigError> {
        let mut c = Commands::default();
        for e in entries {
            if e.contains('/') {
                if !e.starts_with('/') {
                    return Err(ConfigError(format!(
                        "ALLOWED_COMMANDS entry '{e}' is a relative path; write it absolute"
                    )));
                }
                let p = Path::new(e);
                c.prefixes
                    .push(std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
            } else {
                match find_in_path(e, path_var) {
                    Some(found) => {
                        if let Ok(canon) = std::fs::canonicalize(&found) {
                            c.name_files.push(canon);
                        }
                        c.names.insert(e.clone(), found);
                    }
                    None => c.missing.push(e.clone()),
                }
            }
        }
        Ok(c)
    }

    /// The file to run for `argv0`, or why not. `canonical` is `argv0`
    /// canonicalized, for a program written with a `/` (see [`canonical`]).
    pub fn decide(&self, argv0: &str, canonical: Option<&Path>) -> Result<PathBuf, Refusal> {
        let refused = || Refusal::Command {
            program: argv0.to_string(),
        };
        if !argv0.contains('/') {
            return self.names.get(argv0).cloned().ok_or_else(refused);
        }
        let Some(real) = canonical else {
            return Err(refused());
        };
        if self.name_files.iter().any(|f| f == real) || self.prefixes.iter().any(|p| under(real, p))
        {
            Ok(real.to_path_buf())
        } else {
            Err(refused())
        }
    }
}

/// `argv0` (which has a `/`) with every symlink, `.` and `..` resolved
/// against the worker's current directory; `None` if it does not exist.
pub fn canonical(argv0: &str) -> Option<PathBuf> {
    std::fs::canonicalize(argv0).ok()
}

/// Whether `path` is `prefix` or lies under it, on whole segments
/// (`/opt/jobs` covers `/opt/jobs/x`, not `/opt/jobs2/x`). Both are absolute
/// and canonical.
pub fn under(path: &Path, prefix: &Path) -> bool {
    let (path, prefix) = (
        path.as_os_str().as_encoded_bytes(),
        prefix.as_os_str().as_encoded_bytes(),
    );
    let prefix = match prefix {
        [rest @ .., b'/'] if !rest.is_empty() => rest,
        p => p,
    };
    if prefix == b"/" {
        return path.starts_with(b"/");
    }
    path == prefix || (path.starts_with(prefix) && path.get(prefix.len()) == Some(&b'/'))
}

/// The first executable file called `name` in the directories of
/// `path_var` (the standard default when it is unset); empty entries (the
/// current directory) are skipped.
pub fn find_in_path(name: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path_var = path_var.unwrap_or(std::ffi::OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(path_var)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

// ---------------------------------------------------------------------------
// Images.

/// Whether `ALLOWED_IMAGES` lets an order run `image`. `None` (unset) allows
/// none. An entry `*` allows every image; an entry ending in `/` allows
/// every image of that repository prefix (`registry.internal/jobs/`); an
/// entry with a tag or digest (`alpine:3.20`, `x@sha256:...`) allows exactly
/// that reference; any other entry allows that image name with any tag or
/// digest (`alpine` allows `alpine`, `alpine:3`, not `alpine2` or
/// `evil/alpine`). Names are compared as written: `alpine` does not allow
/// `docker.io/library/alpine`.
pub fn check_image(image: &str, allowed: &Option<Vec<String>>) -> Result<(), Refusal> {
    let image = image.to_string();
    match allowed {
        _ if image_allowed(&image, allowed) => Ok(()),
        None => Err(Refusal::ImagesOff { image }),
        Some(_) => Err(Refusal::Image { image }),
    }
}

/// Whether `ALLOWED_IMAGES` (`allowed`) allows `image` (see [`check_image`]).
pub fn image_allowed(image: &str, allowed: &Option<Vec<String>>) -> bool {
    let Some(allowed) = allowed else { return false };
    let name = image_name(image);
    allowed.iter().any(|e| {
        if e == "*" {
            true
        } else if e.ends_with('/') {
            name.starts_with(e.as_str())
        } else if image_name(e) != e {
            image == e
        } else {
            name == e
        }
    })
}

/// An image reference without its tag and digest (`host:5000/a/b:1@sha256:x`
/// is `host:5000/a/b`).
fn image_name(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    }
}

// ---------------------------------------------------------------------------
// URLs.

/// One `ALLOWED_URLS` entry, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlRule {
    pub scheme: String,
    pub host: String,
    pub port: u16,
    /// The path's segments (`/orders/` and `/orders` are both `["orders"]`).
    pub segments: Vec<String>,
}

impl UrlRule {
    pub fn parse(entry: &str) -> Result<UrlRule, ConfigError> {
        let bad = |why: &str| ConfigError(format!("ALLOWED_URLS entry '{entry}' {why}"));
        let u = url::Url::parse(entry).map_err(|e| bad(&format!("is not a URL ({e})")))?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err(bad("is not http:// or https://"));
        }
        if !u.username().is_empty() || u.password().is_some() {
            return Err(bad("has credentials"));
        }
        if u.query().is_some() || u.fragment().is_some() {
            return Err(bad("has a query or fragment"));
        }
        let (Some(host), Some(port)) = (u.host_str(), u.port_or_known_default()) else {
            return Err(bad("has no host"));
        };
        Ok(UrlRule {
            scheme: u.scheme().into(),
            host: host.into(),
            port,
            segments: segments(&u),
        })
    }

    /// Whether `u` is under this rule.
    pub fn covers(&self, u: &url::Url) -> bool {
        let segs = segments(u);
        u.scheme() == self.scheme
            && u.host_str() == Some(self.host.as_str())
            && u.port_or_known_default() == Some(self.port)
            && segs.len() >= self.segments.len()
            && segs.iter().zip(&self.segments).all(|(a, b)| a == b)
    }
}

/// A parsed URL's path segments, the empty last one (a trailing `/`) left out.
fn segments(u: &url::Url) -> Vec<String> {
    let mut s: Vec<String> = u
        .path_segments()
        .map(|s| s.map(str::to_string).collect())
        .unwrap_or_default();
    if s.last().is_some_and(|l| l.is_empty()) {
        s.pop();
    }
    s
}

/// Parses `ALLOWED_URLS` (each entry; `None` stays `None`).
pub fn parse_url_rules(list: Option<Vec<String>>) -> Result<Option<Vec<UrlRule>>, ConfigError> {
    list.map(|l| l.iter().map(|e| UrlRule::parse(e)).collect())
        .transpose()
}

/// Whether a URL order may fetch `url` (already parsed): under one of the
/// rules (`None` allows every URL). A path with an encoded `/` or `\` is
/// refused under rules: a server that decodes it before resolving `..`
/// would leave the rule's path.
pub fn url_allowed(u: &url::Url, rules: &Option<Vec<UrlRule>>) -> bool {
    let Some(rules) = rules else { return true };
    let path = u.path().to_ascii_lowercase();
    if path.contains("%2f") || path.contains("%5c") {
        return false;
    }
    rules.iter().any(|r| r.covers(u))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn env(names: &[&str]) -> BTreeMap<String, String> {
        names
            .iter()
            .map(|n| (n.to_string(), "v".to_string()))
            .collect()
    }

    #[test]
    fn the_floor_is_refused_whatever_the_allow_list() {
        let star = Some(vec!["*".to_string()]);
        for n in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "BASH_ENV",
            "ENV",
            "BASH_FUNC_echo%%",
            "PATH",
            "PYTHONPATH",
            "PYTHONSTARTUP",
            "PERL5OPT",
            "PERL5LIB",
            "RUBYOPT",
            "NODE_OPTIONS",
            "JAVA_TOOL_OPTIONS",
            "DOCKER_HOST",
            "DOCKER_CONFIG",
            "GCONV_PATH",
            "GLIBC_TUNABLES",
            "SHELLOPTS",
            "PS4",
            "https_proxy",
            "GIT_SSH_COMMAND",
        ] {
            for allow in [&None, &star] {
                let why = env_refusal(n, allow, false).unwrap_or_else(|| panic!("{n} allowed"));
                assert_eq!(why, Refusal::EnvNever { name: n.into() });
                let why = why.to_string();
                assert!(why.contains(n) && why.contains("never"), "{why}");
                assert!(check_env(&env(&["A", n]), allow, false).is_err());
            }
        }
        assert_eq!(env_refusal("DEST", &None, false), None);
        assert_eq!(
            env_refusal("LD", &None, false),
            None,
            "a prefix is not the name"
        );
        assert_eq!(env_refusal("HOME", &None, false), None);
        assert!(
            env_refusal("HOME", &None, true).is_some(),
            "image orders: the docker CLI reads $HOME/.docker"
        );
    }

    #[test]
    fn the_allow_list_allows_only_what_it_names() {
        let allow = Some(vec!["DEST".to_string(), "APP_*".to_string()]);
        assert!(check_env(&env(&["DEST", "APP_X", "APP_"]), &allow, false).is_ok());
        let why = check_env(&env(&["DEST", "OTHER"]), &allow, false).unwrap_err();
        assert_eq!(
            why.to_string(),
            "the order sets OTHER, which ORDER_ENV_ALLOW does not allow"
        );
        assert!(check_env(&env(&["DESTX"]), &allow, false).is_err());
        assert!(check_env(&env(&[]), &Some(vec![]), false).is_ok());
        assert!(check_env(&env(&["A"]), &Some(vec![]), false).is_err());
        assert!(parse_env_allow(Some(vec!["LD_PRELOAD".into()]))
            .unwrap_err()
            .0
            .contains("LD_PRELOAD"));
        assert!(parse_env_allow(Some(vec!["PYTHONPATH".into()])).is_err());
        assert_eq!(
            parse_env_allow(Some(vec!["A*".into()])).unwrap(),
            Some(vec!["A*".to_string()])
        );
    }

    #[test]
    fn commands_resolve_names_through_the_workers_path_once() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let tool = bin.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(bin.join("plain"), "not executable").unwrap();
        let jobs = dir.path().join("jobs");
        std::fs::create_dir(&jobs).unwrap();
        std::os::unix::fs::symlink(&tool, jobs.join("link-out")).unwrap();
        std::os::unix::fs::symlink("/bin/sh", jobs.join("sh-link")).unwrap();
        let entries: Vec<String> = ["tool", "plain", "nowhere", &format!("{}/", jobs.display())]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let c = Commands::resolve(&entries, Some(bin.as_os_str())).unwrap();
        let real_tool = std::fs::canonicalize(&tool).unwrap();
        assert_eq!(c.decide("tool", None), Ok(tool.clone()));
        assert_eq!(c.missing, vec!["plain".to_string(), "nowhere".to_string()]);
        assert!(c.decide("plain", None).is_err());
        assert!(c.decide("sh", None).is_err());
        // A path: resolved, then under a prefix or the very file of a name.
        let t = tool.to_str().unwrap();
        assert_eq!(c.decide(t, canonical(t).as_deref()), Ok(real_tool.clone()));
        let link = jobs.join("link-out");
        let l = link.to_str().unwrap();
        assert_eq!(
            c.decide(l, canonical(l).as_deref()),
            Ok(real_tool),
            "resolves to an allowed file"
        );
        let s = jobs.join("sh-link");
        let s = s.to_str().unwrap();
        assert!(
            c.decide(s, canonical(s).as_deref()).is_err(),
            "a link out of the prefix"
        );
        let climb = format!("{}/../bin/tool", jobs.display());
        assert!(
            c.decide(&climb, canonical(&climb).as_deref()).is_ok(),
            "climbs to an allowed file"
        );
        let climb = format!("{}/../../../bin/sh", jobs.display());
        assert!(c.decide(&climb, canonical(&climb).as_deref()).is_err());
        assert!(c.decide("./tool", None).is_err());
        assert!(Commands::resolve(&["jobs/".to_string()], None).is_err());
    }

    #[test]
    fn under_is_on_segment_boundaries() {
        let u = |a: &str, b: &str| under(Path::new(a), Path::new(b));
        assert!(u("/opt/jobs/x", "/opt/jobs"));
        assert!(u("/opt/jobs/x", "/opt/jobs/"));
        assert!(u("/opt/jobs", "/opt/jobs/"));
        assert!(u("/opt/jobs/a/b", "/opt/jobs"));
        assert!(!u("/opt/jobs2/x", "/opt/jobs"));
        assert!(!u("/opt/job", "/opt/jobs"));
        assert!(u("/x", "/"));
    }

    #[test]
    fn images() {
        let a = Some(vec![
            "alpine".to_string(),
            "registry.internal/jobs/".to_string(),
            "busybox:1.36".to_string(),
        ]);
        for ok in [
            "alpine",
            "alpine:3",
            "alpine@sha256:abc",
            "registry.internal/jobs/x:1",
            "busybox:1.36",
        ] {
            assert!(image_allowed(ok, &a), "{ok}");
        }
        for no in [
            "alpine2",
            "evil/alpine",
            "docker.io/library/alpine",
            "registry.internal/jobs2/x",
            "busybox",
            "busybox:latest",
        ] {
            assert!(!image_allowed(no, &a), "{no}");
        }
        assert!(
            !image_allowed("alpine", &None),
            "unset: image orders are refused"
        );
        assert!(!image_allowed("alpine", &Some(vec![])));
        assert!(image_allowed("anything/at:all", &Some(vec!["*".into()])));
        assert_eq!(image_name("host:5000/a/b:1@sha256:x"), "host:5000/a/b");
        assert_eq!(image_name("host:5000/a/b"), "host:5000/a/b");
    }

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).unwrap()
    }

    #[test]
    fn urls_are_compared_on_their_parts() {
        let rules = parse_url_rules(Some(vec![
            "http://orders.internal".into(),
            "https://h:8443/jobs/".into(),
        ]))
        .unwrap();
        for ok in [
            "http://orders.internal/x",
            "http://ORDERS.internal:80/x/y",
            "http://orders.internal",
            "https://h:8443/jobs",
            "https://h:8443/jobs/a?q=1",
            "https://h:8443/x/../jobs/a",
        ] {
            assert!(url_allowed(&url(ok), &rules), "{ok}");
        }
        for no in [
            "http://orders.internal.evil.net/x",
            "http://orders.internal:8080/x",
            "https://orders.internal/x",
            "http://orders.internal@evil.net/x",
            "https://h:8443/jobs2/a",
            "https://h/jobs/a",
            "https://h:8443/jobs/../secret",
            "https://h:8443/jobs/%2e%2e/secret",
            "https://h:8443/jobs/..%2fsecret",
        ] {
            assert!(!url_allowed(&url(no), &rules), "{no}");
        }
        assert!(url_allowed(&url("http://anything/"), &None));
        for bad in [
            "orders.internal",
            "ftp://h/",
            "http://u:p@h/",
            "http://h/?q",
            "http://h/#f",
        ] {
            assert!(UrlRule::parse(bad).is_err(), "{bad}");
        }
    }

    /// Segments drawn from a small alphabet, so that prefixes collide often.
    fn seg() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "ab", "a.b", "b", "jobs", "jobs2", "x"])
            .prop_map(str::to_string)
    }

    proptest! {
        /// `under` against the obvious reference: the prefix's segments
        /// are the first segments of the path.
        #[test]
        fn under_matches_the_segment_reference(
            p in prop::collection::vec(seg(), 0..5),
            q in prop::collection::vec(seg(), 0..4),
            slash in any::<bool>(),
        ) {
            let path = PathBuf::from(format!("/{}", p.join("/")));
            let mut prefix = format!("/{}", q.join("/"));
            if slash && !q.is_empty() { prefix.push('/'); }
            let reference = p.len() >= q.len() && p[..q.len()] == q[..];
            prop_assert_eq!(under(&path, Path::new(&prefix)), reference, "{:?} under {}", path, prefix);
        }

        /// Command decisions against a reference that works on the parts:
        /// a name only by exact name, a path only by segments of a prefix.
        #[test]
        fn commands_match_the_reference(
            name in prop::sample::select(vec!["echo", "ech", "echo2", "cp", "sh"]),
            p in prop::collection::vec(seg(), 1..4),
            q in prop::collection::vec(seg(), 1..3),
        ) {
            let c = Commands {
                names: BTreeMap::from([("echo".to_string(), PathBuf::from("/usr/bin/echo"))]),
                name_files: vec![PathBuf::from("/usr/bin/echo")],
                prefixes: vec![PathBuf::from(format!("/{}", q.join("/")))],
                missing: vec![],
            };
            prop_assert_eq!(c.decide(name, None).is_ok(), name == "echo");
            let path = format!("/{}", p.join("/"));
            let reference = p.len() >= q.len() && p[..q.len()] == q[..];
            prop_assert_eq!(c.decide(&path, Some(Path::new(&path))).is_ok(), reference);
            let relative = format!("./{}", name);
            prop_assert!(c.decide(&relative, None).is_err());
        }

        /// URL decisions against a reference built from the generated parts
        /// (scheme, lower-cased host, effective port, path segments).
        #[test]
        fn urls_match_the_reference(
            scheme in prop::sample::select(vec!["http", "https"]),
            host in prop::sample::select(vec!["h", "H", "h.evil", "hh", "127.0.0.1", "h."]),
            port in prop::sample::select(vec![None, Some(80u16), Some(443), Some(8080)]),
            p in prop::collection::vec(seg(), 0..4),
            trailing in any::<bool>(),
            r_scheme in prop::sample::select(vec!["http", "https"]),
            r_host in prop::sample::select(vec!["h", "h.evil", "127.0.0.1"]),
            r_port in prop::sample::select(vec![None, Some(80u16), Some(8080)]),
            q in prop::collection::vec(seg(), 0..3),
        ) {
            let fmt = |s: &str, h: &str, port: Option<u16>, segs: &[String], slash: bool| {
                let mut u = format!("{s}://{h}");
                if let Some(p) = port { u.push_str(&format!(":{p}")); }
                u.push('/');
                u.push_str(&segs.join("/"));
                if slash && !segs.is_empty() { u.push('/'); }
                u
            };
            let rule = fmt(r_scheme, r_host, r_port, &q, true);
            let target = fmt(scheme, host, port, &p, trailing);
            let rules = parse_url_rules(Some(vec![rule.clone()])).unwrap();
            let effective = |s: &str, p: Option<u16>| p.unwrap_or(if s == "http" { 80 } else { 443 });
            let reference = scheme == r_scheme
                && host.to_ascii_lowercase() == r_host
                && effective(scheme, port) == effective(r_scheme, r_port)
                && p.len() >= q.len() && p[..q.len()] == q[..];
            prop_assert_eq!(url_allowed(&url(&target), &rules), reference, "{} under {}", target, rule);
        }
    }
}
