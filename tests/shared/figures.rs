//! Shared by both test binaries (`tests/live`, `tests/pure`), included
//! with `#[path]` by each harness.

/// Appends a line of figures to `target/figures.txt`, which CI prints at the
/// end of its run (the test harness hides a passing test's output).
pub fn record_figures(line: &str) {
    use std::io::Write as _;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/figures.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}
