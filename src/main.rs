//! The `ateam` binary: parse arguments, set up logging, run one command, map its result to an
//! exit code.
//!
//! - `cli`: the clap types (arguments only);
//! - `logging`: the one `tracing` subscriber every command installs (stderr, text or JSON);
//! - `commands`: one module per verb, thin handlers over the library; `commands::exit` maps
//!   every verdict and every error to an exit code (docs/exit-codes.md).

mod cli;
mod commands;
mod logging;

use std::process::ExitCode;

use clap::Parser;

use commands::exit::{self, Exit};

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // Commands are short and watched by a person (`logging::COMMAND_DEFAULT`); the controller
    // and the login keeper run unwatched, and their logs are the record of what they did.
    let default = if matches!(
        args.command,
        cli::Command::Controller(_) | cli::Command::LoginKeeper
    ) {
        tracing::Level::INFO
    } else {
        logging::COMMAND_DEFAULT
    };
    if let Err(e) = logging::init(&args.log, default) {
        eprintln!("error: {e}");
        return Exit::Error.into();
    }
    match commands::run(args) {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("error: {}", exit::message(&e));
            exit::classify(&e).into()
        }
    }
}
