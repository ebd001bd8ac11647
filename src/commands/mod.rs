//! One module per command. Handlers are thin: they call the library and add context.

mod apply;
mod common;
mod completion;
mod controller;
mod delete;
mod diff;
mod doctor;
mod member;
mod progress;
mod schema;
mod status;
mod validate;

use std::future::Future;
use std::process::ExitCode;

use crate::cli::{Cli, Command};

/// Invalid input, a failed command, or (with --exit-code) drift.
pub const EXIT_ERROR: u8 = 1;
/// A usage error found after clap's own checks (an invalid `RUST_LOG`); clap uses 2 too.
pub const EXIT_USAGE: u8 = 2;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let g = &cli.global;
    match cli.command {
        Command::Validate { files, show } => validate::run(g, &files, show),
        Command::Schema => schema::run(),
        Command::Apply {
            files,
            prune,
            dry_run,
            concurrency,
            no_wait,
        } => block_on(apply::run(
            g,
            &files,
            apply::Opts {
                prune,
                dry_run,
                concurrency,
                no_wait,
            },
        ))?,
        Command::Diff {
            files,
            prune,
            output,
        } => Ok(block_on(diff::run(g, &files, prune, output))?),
        Command::Status {
            team,
            files,
            output,
            exit_code,
        } => block_on(status::run(g, team.as_deref(), &files, output, exit_code))?,
        Command::Delete {
            files,
            team,
            purge,
            no_wait,
        } => block_on(delete::run(g, &files, team.as_deref(), purge, no_wait))?,
        Command::Controller {
            files,
            prune,
            resync,
            once,
            crash_backoff,
            crash_reset,
            concurrency,
        } => controller::run(
            g,
            &files,
            controller::Opts {
                prune,
                resync,
                once,
                crash_backoff,
                crash_reset,
                concurrency,
            },
        ),
        Command::Logs {
            member,
            team,
            tail,
            follow,
        } => block_on(member::logs(g, team.as_deref(), &member, tail, follow))?,
        Command::Exec {
            member,
            team,
            command,
        } => block_on(member::exec(g, team.as_deref(), &member, &command))?,
        Command::Doctor { files, output } => block_on(doctor::run(g, &files, output))?,
        Command::Completion { shell } => completion::completion(shell),
        Command::Man { dir } => completion::man(dir.as_deref()),
    }
}

/// The engine commands are async; validate and schema need no runtime.
fn block_on<F: Future>(f: F) -> anyhow::Result<F::Output> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(f))
}
