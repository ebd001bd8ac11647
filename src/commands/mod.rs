//! One module per command. Handlers are thin: they call the library and add context.

mod schema;
mod validate;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

/// Invalid input or a failed command.
pub const EXIT_ERROR: u8 = 1;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate { files, show } => validate::run(&cli.global, &files, show),
        Command::Schema => schema::run(),
    }
}
