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
    // Commands are short and watched by a person (`logging::COMMAND_DEFAULT`); the controller
    // runs unwatched, and its log is the record of what it did.
    let default = match args.command {
        cli::Command::Controller { .. } => tracing::Level::INFO,
        _ => logging::COMMAND_DEFAULT,
    };
    if let Err(e) = logging::init(&args.log, default) {
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
