//! The `pool_worker` binary: see [`pool_worker::cli`].

fn main() -> std::process::ExitCode {
    pool_worker::cli::main()
}
