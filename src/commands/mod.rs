//! One module per command. Handlers are thin: they call the library and add context.

mod apply;
mod common;
mod delete;
mod diff;
mod member;
mod progress;
mod schema;
mod status;
mod validate;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

/// Invalid input, a failed command, or (with --exit-code) drift.
pub const EXIT_ERROR: u8 = 1;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let g = &cli.global;
    match cli.command {
        Command::Validate { files, show } => validate::run(g, &files, show),
        Command::Schema => schema::run(),
        command => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                match command {
                    Command::Apply {
                        files,
                        prune,
                        dry_run,
                        concurrency,
                        no_wait,
                    } => {
                        apply::run(
                            g,
                            &files,
                            apply::Opts {
                                prune,
                                dry_run,
                                concurrency,
                                no_wait,
                            },
                        )
                        .await
                    }
                    Command::Diff {
                        files,
                        prune,
                        output,
                    } => Ok(diff::run(g, &files, prune, output).await),
                    Command::Status {
                        team,
                        files,
                        output,
                        exit_code,
                    } => status::run(g, team.as_deref(), &files, output, exit_code).await,
                    Command::Delete {
                        files,
                        team,
                        purge,
                        no_wait,
                    } => delete::run(g, &files, team.as_deref(), purge, no_wait).await,
                    Command::Logs { member, team, tail } => {
                        member::logs(g, team.as_deref(), &member, tail).await
                    }
                    Command::Exec {
                        member,
                        team,
                        command,
                    } => member::exec(g, team.as_deref(), &member, &command).await,
                    Command::Validate { .. } | Command::Schema => unreachable!("handled above"),
                }
            })
        }
    }
}
