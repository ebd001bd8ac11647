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

mod agent;
mod agents;
mod apply;
mod approvals;
mod board;
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
mod helper_server;
mod login;
mod member;
mod output;
mod progress;
mod schema;
mod status;
mod top;
mod transcript;
mod validate;
mod workspace;

use std::future::Future;

use crate::cli::{Cli, Command, ControllerFlags, LogsFlags};
use ateam::backend::LogOptions;
use exit::Exit;

/// Runs one command: its verdict, or the error that `exit::classify` maps to a code.
pub fn run(cli: Cli) -> anyhow::Result<Exit> {
    let g = &cli.global;
    match cli.command {
        Command::Validate { files, show } => validate::run(g, &files, show),
        Command::Schema { of } => schema::run(of),
        c @ (Command::Apply { .. }
        | Command::Diff { .. }
        | Command::Status { .. }
        | Command::Approvals { .. }
        | Command::Delete { .. }) => team_command(g, c),
        Command::Events {
            team,
            watch,
            output,
        } => events::run(g, team.as_deref(), watch, output),
        Command::Agents(crate::cli::AgentsCommand::Pull {
            name,
            version,
            sha256,
            from,
        }) => block_on(agents::pull(&name, version, sha256, from.as_deref()))?,
        Command::Controller(args) => controller(g, args),
        Command::Logs(args) => logs(g, args),
        Command::Export { team, output } => export::run(g, &team, output.as_deref()),
        Command::RotateCa { team } => egress::rotate_ca(g, &team),
        Command::Login(c) => login::run(g, c),
        Command::LoginKeeper => login::keeper(g),
        Command::HelperServer {
            team,
            member,
            socket_owner,
        } => helper_server::run(g, team, member, &socket_owner),
        Command::EgressProxy {
            socket,
            policy,
            log,
            pid_file,
            user,
            detach,
        } => egress::proxy(
            ateam::servers::egress::proxy::Config {
                socket,
                policy,
                log,
                pid_file,
            },
            user.as_deref(),
            detach,
        ),
        c @ (Command::Exec { .. }
        | Command::Transcript { .. }
        | Command::Restart { .. }
        | Command::Task { .. }
        | Command::Attach { .. }
        | Command::Changes { .. }
        | Command::Collect { .. }
        | Command::Snapshots { .. }
        | Command::Rollback { .. }
        | Command::Reset { .. }) => member_command(g, c),
        Command::Tasks { action, team, json } => board::tasks(g, team.as_deref(), action, json),
        Command::Messages {
            action,
            team,
            json,
            last,
        } => board::messages(g, team.as_deref(), action, json, last),
        Command::Mcp { team, session } => board::mcp(g, team.as_deref(), &session),
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

/// The commands on a team as a whole: apply, diff, status, approvals, delete.
fn team_command(g: &crate::cli::Global, c: Command) -> anyhow::Result<Exit> {
    match c {
        Command::Apply {
            files,
            prune,
            dry_run,
            concurrency,
            no_wait,
            learn,
        } => block_on(apply::run(
            g,
            &files,
            apply::Opts {
                prune,
                dry_run,
                concurrency,
                no_wait,
                learn,
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
        Command::Approvals {
            team,
            output,
            proposal,
            answer,
        } => block_on(approvals::run(g, team.as_deref(), output, proposal, answer))?,
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
        // Named, not `_`: a new command is looked at here too. `run` handles these itself or
        // sends them elsewhere.
        Command::Validate { .. }
        | Command::Schema { .. }
        | Command::Events { .. }
        | Command::Agents(_)
        | Command::Controller(_)
        | Command::Logs(_)
        | Command::Export { .. }
        | Command::RotateCa { .. }
        | Command::Login(_)
        | Command::LoginKeeper
        | Command::HelperServer { .. }
        | Command::EgressProxy { .. }
        | Command::Exec { .. }
        | Command::Transcript { .. }
        | Command::Changes { .. }
        | Command::Collect { .. }
        | Command::Snapshots { .. }
        | Command::Rollback { .. }
        | Command::Reset { .. }
        | Command::Restart { .. }
        | Command::Task { .. }
        | Command::Tasks { .. }
        | Command::Messages { .. }
        | Command::Mcp { .. }
        | Command::Attach { .. }
        | Command::Top { .. }
        | Command::Doctor { .. }
        | Command::Completion { .. }
        | Command::Man { .. } => unreachable!("`run` sends a team command only"),
    }
}

/// The commands on one member: its container (exec, restart, attach), its agent (transcript,
/// task) and its workspace (changes, collect, snapshots, rollback, reset).
fn member_command(g: &crate::cli::Global, c: Command) -> anyhow::Result<Exit> {
    match c {
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
        Command::Transcript {
            member,
            team,
            follow,
            session,
            list,
            json,
        } => transcript::run(
            g,
            team.as_deref(),
            &member,
            transcript::Opts {
                follow,
                session,
                list,
                json,
            },
        ),
        Command::Restart {
            member,
            team,
            no_wait,
        } => block_on(member::restart(g, team.as_deref(), &member, no_wait))?,
        Command::Task {
            member,
            task,
            team,
            wait,
        } => block_on(agent::task(g, team.as_deref(), &member, &task, wait))?,
        Command::Attach { name, team } => block_on(member::attach(g, team.as_deref(), &name))?,
        Command::Changes {
            member,
            team,
            diff,
            json,
        } => block_on(workspace::changes(g, team.as_deref(), &member, diff, json))?,
        Command::Collect { member, team, into } => block_on(workspace::collect(
            g,
            team.as_deref(),
            &member,
            into.as_deref(),
        ))?,
        Command::Snapshots { member, team } => {
            block_on(workspace::snapshots(g, team.as_deref(), &member))?
        }
        Command::Rollback { member, team, to } => block_on(workspace::rollback(
            g,
            team.as_deref(),
            &member,
            to.as_deref(),
            false,
        ))?,
        Command::Reset { member, team } => {
            block_on(workspace::rollback(g, team.as_deref(), &member, None, true))?
        }
        // Named, not `_`: a new command is looked at here too. `run` handles these itself or
        // sends them elsewhere.
        Command::Validate { .. }
        | Command::Schema { .. }
        | Command::Apply { .. }
        | Command::Diff { .. }
        | Command::Status { .. }
        | Command::Events { .. }
        | Command::Approvals { .. }
        | Command::Delete { .. }
        | Command::Agents(_)
        | Command::Controller(_)
        | Command::Logs(_)
        | Command::Export { .. }
        | Command::RotateCa { .. }
        | Command::Login(_)
        | Command::LoginKeeper
        | Command::HelperServer { .. }
        | Command::EgressProxy { .. }
        | Command::Tasks { .. }
        | Command::Messages { .. }
        | Command::Mcp { .. }
        | Command::Top { .. }
        | Command::Doctor { .. }
        | Command::Completion { .. }
        | Command::Man { .. } => unreachable!("`run` sends a member command only"),
    }
}

/// `ateam controller`: the flags as the daemon's options.
fn controller(g: &crate::cli::Global, a: ControllerFlags) -> anyhow::Result<Exit> {
    controller::run(
        g,
        &a.files,
        controller::Opts {
            prune: a.prune,
            resync: a.resync,
            once: a.once,
            crash_backoff: a.crash_backoff,
            crash_reset: a.crash_reset,
            concurrency: a.concurrency,
            metrics: a.metrics,
            metrics_allow_remote: a.metrics_allow_remote,
        },
    )
}

/// `ateam logs`: one member's output, its egress (`--egress`), or every member a selector
/// matches.
fn logs(g: &crate::cli::Global, a: LogsFlags) -> anyhow::Result<Exit> {
    let opts = LogOptions {
        tail: a.tail,
        follow: a.follow,
        since: a.since,
        timestamps: a.timestamps,
    };
    match (a.member, a.selector, a.egress) {
        (Some(member), _, true) => egress::logs(g, a.team.as_deref(), &member, a.tail, a.since),
        (None, _, true) => anyhow::bail!("--egress shows one member's connections: name it"),
        (None, Some(selector), false) => {
            let opts = LogOptions {
                follow: false,
                ..opts
            };
            block_on(member::logs_selected(g, a.team.as_deref(), &selector, opts))?
        }
        (member, _, false) => {
            let member = member.unwrap_or_default();
            block_on(member::logs(g, a.team.as_deref(), &member, opts))?
        }
    }
}

/// The engine commands are async; validate and schema need no runtime.
fn block_on<F: Future>(f: F) -> anyhow::Result<F::Output> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(f))
}
