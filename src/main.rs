//! The `bosun` binary: parses the command line and hands over to the library.

fn main() -> std::process::ExitCode {
    let cli = bosun::cli::Cli::from_process();
    bosun::cli::main(cli)
}
