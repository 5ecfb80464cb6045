//! The `bosun` binary: parses the command line and hands over to the library.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = bosun::cli::Cli::parse();
    bosun::cli::main(cli)
}
