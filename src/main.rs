//! The `ateam` binary: parse arguments, run one command, map its result to an exit code.

mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match commands::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(commands::EXIT_ERROR)
        }
    }
}
