//! Shared by both test binaries (the core's `tests/pure` and the binary's
//! `pool_worker/tests/live`), included with `#[path]` by each harness.

/// Appends a line of figures to `target/figures.txt` (the workspace's target
/// directory, found from the test binary's own path,
/// `target/<profile>/deps/<test>`), which CI prints at the end of its run
/// (the test harness hides a passing test's output).
pub fn record_figures(line: &str) {
    use std::io::Write as _;
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let Some(target) = exe.ancestors().nth(3) else {
        return;
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(target.join("figures.txt"))
    {
        let _ = writeln!(f, "{line}");
    }
}
