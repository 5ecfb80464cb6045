//! The `bosun` binary: parses the command line and hands over to the library.

/// bosun's allocator (`bosun::memory::Allocator`), sampled for `/debug/pprof/heap` once
/// `--pprof-address` is set.
#[global_allocator]
static ALLOCATOR: bosun::profiling::heap::Sampling = bosun::profiling::heap::Sampling;

fn main() -> std::process::ExitCode {
    let cli = bosun::cli::Cli::from_process();
    bosun::cli::main(cli)
}
