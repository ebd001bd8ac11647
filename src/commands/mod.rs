//! One module per command. Handlers are thin: they call the library and add context.

/// `print!` for a command's output: a reader that went away (`ateam status | head`) ends the
/// command quietly, as SIGPIPE would, instead of a panic.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::commands::output::write_stdout(format_args!($($arg)*))
    };
}

/// `println!`, as `out!`.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::commands::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod apply;
mod common;
mod completion;
mod controller;
mod delete;
mod diff;
mod doctor;
mod egress;
mod events;
pub mod exit;
mod export;
mod member;
mod output;
mod progress;
mod schema;
mod status;
mod top;
mod validate;

use std::future::Future;

use crate::cli::{Cli, Command};
use ateam::backend::LogOptions;
use exit::Exit;

/// Runs one command: its verdict, or the error that `exit::classify` maps to a code.
pub fn run(cli: Cli) -> anyhow::Result<Exit> {
    let g = &cli.global;
    match cli.command {
        Command::Validate { files, show } => validate::run(g, &files, show),
        Command::Schema { of } => schema::run(of),
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
        } => block_on(diff::run(g, &files, prune, output))?,
        Command::Status {
            team,
            files,
            output,
            exit_code,
            selector,
            watch,
        } => block_on(status::run(
            g,
            status::Args {
                team: team.as_deref(),
                files: &files,
                output,
                exit_code,
                selector: selector.as_ref(),
                watch,
            },
        ))?,
        Command::Events {
            team,
            watch,
            output,
        } => events::run(g, team.as_deref(), watch, output),
        Command::Delete {
            files,
            team,
            selector,
            purge,
            no_wait,
        } => {
            let which = delete::Which {
                team: team.as_deref(),
                selector: selector.as_ref(),
            };
            block_on(delete::run(g, &files, which, purge, no_wait))?
        }
        Command::Controller {
            files,
            prune,
            resync,
            once,
            crash_backoff,
            crash_reset,
            concurrency,
            metrics,
            metrics_allow_remote,
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
                metrics,
                metrics_allow_remote,
            },
        ),
        Command::Logs {
            member: Some(member),
            team,
            tail,
            since,
            egress: true,
            ..
        } => egress::logs(g, team.as_deref(), &member, tail, since),
        Command::Logs { egress: true, .. } => {
            anyhow::bail!("--egress shows one member's connections: name it")
        }
        Command::Logs {
            member: None,
            team,
            tail,
            since,
            timestamps,
            selector: Some(selector),
            ..
        } => {
            let opts = LogOptions {
                tail,
                follow: false,
                since,
                timestamps,
            };
            block_on(member::logs_selected(g, team.as_deref(), &selector, opts))?
        }
        Command::Logs {
            member,
            team,
            tail,
            follow,
            since,
            timestamps,
            ..
        } => {
            let member = member.unwrap_or_default();
            let opts = LogOptions {
                tail,
                follow,
                since,
                timestamps,
            };
            block_on(member::logs(g, team.as_deref(), &member, opts))?
        }
        Command::Export { team, output } => export::run(g, &team, output.as_deref()),
        Command::RotateCa { team } => egress::rotate_ca(g, &team),
        Command::HelperServer {
            team,
            member,
            socket_owner,
        } => export::helper_server(g, team, member, &socket_owner),
        Command::EgressProxy {
            socket,
            policy,
            log,
            pid_file,
            user,
            detach,
        } => egress::proxy(
            ateam::egress::proxy::Config {
                socket,
                policy,
                log,
                pid_file,
            },
            user.as_deref(),
            detach,
        ),
        Command::Exec {
            member,
            team,
            interactive,
            tty,
            command,
        } => {
            let how = member::ExecMode { interactive, tty };
            block_on(member::exec(g, team.as_deref(), &member, how, &command))?
        }
        Command::Attach { name, team } => block_on(member::attach(g, team.as_deref(), &name))?,
        Command::Top { selector } => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?;
            top::run(g, &rt, selector)
        }
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
