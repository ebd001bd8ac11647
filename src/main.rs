//! The `ateam` binary: parse arguments, set up logging, run one command, map its result to an
//! exit code.
//!
//! - `cli`: the clap types (arguments only);
//! - `logging`: the one `tracing` subscriber every command installs (stderr, text or JSON);
//! - `commands`: one module per verb, thin handlers over the library.

mod cli;
mod commands;
mod logging;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // Every command so far is short and watched by a person (see `logging::COMMAND_DEFAULT`).
    if let Err(e) = logging::init(&args.log, logging::COMMAND_DEFAULT) {
        eprintln!("error: {e}");
        return ExitCode::from(commands::EXIT_USAGE);
    }
    match commands::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(commands::EXIT_ERROR)
        }
    }
}
