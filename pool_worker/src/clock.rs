//! The worker's one clock, and the plain wall clock for the tools.
//!
//! [`now_ms`] is what the worker feeds its machine and stamps its records
//! with (`ts`): the wall-clock time (ms since the epoch) read once, at the
//! first call, plus the time elapsed since then on `CLOCK_BOOTTIME`
//! (monotonic, and counting time the system spent suspended). Within a
//! process it never jumps, whatever NTP or an operator does to the wall
//! clock, while `ts` stays close to wall time for people reading the log.
//!
//! The guard of a job (pool_worker/src/guard.rs) counts on `CLOCK_BOOTTIME` itself:
//! [`to_boottime`] turns a worker-clock deadline into a boottime one (the
//! two differ by a constant within the process).
//!
//! With the cargo feature `testing` (the tests' builds), the variable
//! `POOL_TEST_CLOCK_OFFSET_MS` (a signed integer, ms) is added to the
//! worker's clock: a test runs one worker hours ahead or behind the others.
//! Release builds ignore it.
//!
//! [`wall_ms`] is the plain wall clock, for what the tools show people
//! (ages on the web page, `status`).

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The test-only variable that shifts the worker's clock (ms, signed).
pub const OFFSET_VAR: &str = "POOL_TEST_CLOCK_OFFSET_MS";

/// Milliseconds since the epoch on the wall clock (0 before 1970).
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Milliseconds on `CLOCK_BOOTTIME`: since boot, suspend included.
pub fn boottime_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, which we own.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if r != 0 {
        // Linux has had CLOCK_BOOTTIME since 2.6.39; fall back to the
        // monotonic clock rather than panic.
        // SAFETY: as above.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1000).saturating_add(nanos / 1_000_000)
}

/// A worker clock: a wall-clock reading (shifted by a test offset) paired
/// with the boottime reading taken at the same moment.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// The worker's time (ms) at `boot`.
    base: u64,
    /// `CLOCK_BOOTTIME` (ms) when `base` was read.
    boot: u64,
}

impl Clock {
    /// A clock starting now, `offset_ms` ahead (negative: behind) of the
    /// wall clock.
    pub fn new(offset_ms: i64) -> Clock {
        let boot = boottime_ms();
        let wall = i128::from(wall_ms()) + i128::from(offset_ms);
        Clock {
            base: u64::try_from(wall.max(0)).unwrap_or(u64::MAX),
            boot,
        }
    }

    /// The clock's time now (ms).
    pub fn now_ms(&self) -> u64 {
        self.at_boottime(boottime_ms())
    }

    /// The clock's time when `CLOCK_BOOTTIME` reads `boot` (ms).
    pub fn at_boottime(&self, boot: u64) -> u64 {
        let t = i128::from(self.base) + i128::from(boot) - i128::from(self.boot);
        u64::try_from(t.max(0)).unwrap_or(u64::MAX)
    }

    /// When `CLOCK_BOOTTIME` reads this clock's time `t` (ms; 0 for a time
    /// before boot).
    pub fn to_boottime(&self, t: u64) -> u64 {
        let b = i128::from(t) - i128::from(self.base) + i128::from(self.boot);
        u64::try_from(b.max(0)).unwrap_or(u64::MAX)
    }
}

/// The value of [`OFFSET_VAR`] as an offset (0 when unset or not a signed
/// integer; a bad value is reported once on stderr).
pub fn parse_offset(value: Option<&str>) -> i64 {
    match value.map(str::trim) {
        None | Some("") => 0,
        Some(v) => v.parse().unwrap_or_else(|_| {
            eprintln!("pool_worker: ignoring {OFFSET_VAR}='{v}': not a signed integer (ms)");
            0
        }),
    }
}

/// The test offset of this build and process: `POOL_TEST_CLOCK_OFFSET_MS`
/// with the `testing` feature, else 0.
fn offset_ms() -> i64 {
    #[cfg(any(test, feature = "testing"))]
    {
        parse_offset(std::env::var(OFFSET_VAR).ok().as_deref())
    }
    #[cfg(not(any(test, feature = "testing")))]
    {
        0
    }
}

/// This process's worker clock, started at the first call.
fn clock() -> &'static Clock {
    static CLOCK: OnceLock<Clock> = OnceLock::new();
    CLOCK.get_or_init(|| Clock::new(offset_ms()))
}

/// The worker's time now (ms): see the module docs.
pub fn now_ms() -> u64 {
    clock().now_ms()
}

/// When `CLOCK_BOOTTIME` will read the worker's time `t` (ms).
pub fn to_boottime(t: u64) -> u64 {
    clock().to_boottime(t)
}

/// A fresh incarnation id: 64 random bits from the kernel. It names no pid
/// (a job learns nothing from the claims topic about which process to
/// look at); the worker logs its pid beside it when it boots.
pub(crate) fn new_incarnation() -> String {
    format!("{:016x}", random_u64())
}

/// A fresh random 64-bit number from the kernel (`getrandom`), for the
/// incarnation id; falls back to the standard library's random hasher keys.
pub(crate) fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: writes at most 8 bytes into an 8-byte buffer.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == 8 {
        return u64::from_ne_bytes(buf);
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_clock_follows_the_wall_clock_and_never_goes_back() {
        let c = Clock::new(0);
        let (a, w) = (c.now_ms(), wall_ms());
        assert!(a.abs_diff(w) < 1000, "{a} vs {w}");
        let mut last = a;
        for _ in 0..1000 {
            let t = c.now_ms();
            assert!(t >= last);
            last = t;
        }
        let b = boottime_ms();
        assert_eq!(c.to_boottime(c.at_boottime(b)), b);
    }

    #[test]
    fn an_offset_shifts_the_clock_and_keeps_it_monotonic() {
        let hours = 3 * 3600 * 1000;
        for offset in [hours, -hours] {
            let c = Clock::new(offset);
            let now = c.now_ms();
            let expected = (wall_ms() as i64 + offset) as u64;
            assert!(now.abs_diff(expected) < 1000, "{now} vs {expected}");
            let mut last = now;
            for _ in 0..1000 {
                let t = c.now_ms();
                assert!(t >= last);
                last = t;
            }
            // A deadline 500 ms ahead on this clock is 500 ms ahead on
            // boottime, whatever the offset.
            let ahead = c.to_boottime(c.now_ms() + 500);
            assert!(ahead.abs_diff(boottime_ms() + 500) < 50);
        }
        assert_eq!(parse_offset(Some("-3600000")), -3_600_000);
        assert_eq!(parse_offset(Some(" 42 ")), 42);
        assert_eq!(parse_offset(None), 0);
        assert_eq!(parse_offset(Some("soon")), 0);
    }

    /// Not a test: run by [`the_offset_variable_shifts_a_processs_clock`]
    /// in a child process (the clock is read once per process), it prints
    /// the worker clock three times and the wall clock.
    #[test]
    fn as_clock_probe() {
        if std::env::var_os("POOL_TEST_CLOCK_PROBE").is_none() {
            return;
        }
        let a = now_ms();
        let b = now_ms();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let c = now_ms();
        let line = format!("probe {a} {b} {c} {}\n", wall_ms());
        std::io::Write::write_all(&mut std::io::stdout(), line.as_bytes()).unwrap();
        std::process::exit(0);
    }

    /// With the `testing` feature, `POOL_TEST_CLOCK_OFFSET_MS` shifts a
    /// process's worker clock, which still never goes back.
    #[test]
    fn the_offset_variable_shifts_a_processs_clock() {
        let hours = 2 * 3600 * 1000i64;
        for offset in [-hours, hours] {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "clock::tests::as_clock_probe",
                    "--exact",
                    "--nocapture",
                    "--quiet",
                ])
                .env("POOL_TEST_CLOCK_PROBE", "1")
                .env(OFFSET_VAR, offset.to_string())
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("probe "))
                .unwrap_or_else(|| panic!("no probe line in {text:?}"));
            let v: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
            let (a, b, c, wall) = (v[0], v[1], v[2], v[3]);
            assert!(a <= b && b + 20 <= c, "{v:?}");
            let expected = (wall as i64 + offset) as u64;
            assert!(
                c.abs_diff(expected) < 1000,
                "offset {offset}: {c} vs {expected}"
            );
        }
    }
}
