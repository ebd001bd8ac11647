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

use crate::cli::{
    AgentsCommand, ApplyArgs, Cli, Command, ControllerFlags, DeleteArgs, EgressProxyArgs, ExecArgs,
    Global, LogsFlags, StatusArgs, TranscriptArgs,
};
use ateam::backend::LogOptions;
use exit::Exit;

/// Runs one command: its verdict, or the error that `exit::classify` maps to a code. Each
/// arm is one call: a command's arguments are read where that command is run.
pub fn run(cli: Cli) -> anyhow::Result<Exit> {
    let g = &cli.global;
    match cli.command {
        Command::Validate { files, show } => validate::run(g, &files, show),
        Command::Schema { of } => schema::run(of),
        Command::Apply(a) => apply(g, a),
        Command::Diff(a) => block_on(diff::run(g, &a.files, a.prune, a.output))?,
        Command::Status(a) => status(g, a),
        Command::Approvals(a) => block_on(approvals::run(
            g,
            a.team.as_deref(),
            a.output,
            a.proposal,
            a.answer,
        ))?,
        Command::Delete(a) => delete(g, a),
        Command::Events(a) => events::run(g, a.team.as_deref(), a.watch, a.output),
        Command::Agents(AgentsCommand::Pull {
            name,
            version,
            sha256,
            from,
        }) => block_on(agents::pull(&name, version, sha256, from.as_deref()))?,
        Command::Controller(a) => controller(g, a),
        Command::Logs(a) => logs(g, a),
        Command::Export { team, output } => export::run(g, &team, output.as_deref()),
        Command::RotateCa { team } => egress::rotate_ca(g, &team),
        Command::Login(c) => login::run(g, c),
        Command::LoginKeeper => login::keeper(g),
        Command::HelperServer(a) => helper_server::run(g, a.team, a.member, &a.socket_owner),
        Command::EgressProxy(a) => egress_proxy(a),
        Command::Exec(a) => exec(g, a),
        Command::Transcript(a) => transcript(g, a),
        Command::Restart(a) => {
            block_on(member::restart(g, a.team.as_deref(), &a.member, a.no_wait))?
        }
        Command::Suspend(a) => block_on(member::suspend(g, a))?,
        Command::Resume(a) => block_on(member::resume(g, a))?,
        Command::Fork(a) => block_on(member::fork(g, a))?,
        Command::Task(a) => block_on(agent::task(
            g,
            a.team.as_deref(),
            &a.member,
            &a.task,
            a.wait,
        ))?,
        Command::Attach { name, team } => block_on(member::attach(g, team.as_deref(), &name))?,
        Command::Changes(a) => block_on(workspace::changes(
            g,
            a.team.as_deref(),
            &a.member,
            a.diff,
            a.json,
        ))?,
        Command::Collect(a) => block_on(workspace::collect(
            g,
            a.team.as_deref(),
            &a.member,
            a.into.as_deref(),
        ))?,
        Command::Snapshots(a) => block_on(workspace::snapshots(g, a.team.as_deref(), &a.member))?,
        Command::Rollback(a) => block_on(workspace::rollback(
            g,
            a.team.as_deref(),
            &a.member,
            a.to.as_deref(),
            false,
        ))?,
        Command::Reset(a) => block_on(workspace::rollback(
            g,
            a.team.as_deref(),
            &a.member,
            None,
            true,
        ))?,
        Command::Tasks(a) => board::tasks(g, a.team.as_deref(), a.action, a.json),
        Command::Messages(a) => board::messages(g, a.team.as_deref(), a.action, a.json, a.last),
        Command::Mcp { team, session } => board::mcp(g, team.as_deref(), &session),
        Command::Top { selector } => top(g, selector),
        Command::Doctor { files, output } => block_on(doctor::run(g, &files, output))?,
        Command::Completion { shell } => completion::completion(shell),
        Command::Man { dir } => completion::man(dir.as_deref()),
    }
}

/// `ateam apply`: the flags as its options.
fn apply(g: &Global, a: ApplyArgs) -> anyhow::Result<Exit> {
    let opts = apply::Opts {
        prune: a.prune,
        dry_run: a.dry_run,
        concurrency: a.concurrency,
        no_wait: a.no_wait,
        learn: a.learn,
    };
    block_on(apply::run(g, &a.files, opts))?
}

/// `ateam status`: the flags as its arguments.
fn status(g: &Global, a: StatusArgs) -> anyhow::Result<Exit> {
    let args = status::Args {
        team: a.team.as_deref(),
        files: &a.files,
        output: a.output,
        exit_code: a.exit_code,
        selector: a.selector.as_ref(),
        watch: a.watch,
    };
    block_on(status::run(g, args))?
}

/// `ateam delete`: of the manifests' teams, one team, or the teams a selector matches.
fn delete(g: &Global, a: DeleteArgs) -> anyhow::Result<Exit> {
    let which = delete::Which {
        team: a.team.as_deref(),
        selector: a.selector.as_ref(),
    };
    block_on(delete::run(g, &a.files, which, a.purge, a.no_wait))?
}

/// `ateam egress-proxy` (hidden): the proxy of one member, as apply starts it.
fn egress_proxy(a: EgressProxyArgs) -> anyhow::Result<Exit> {
    let config = ateam::servers::egress::proxy::Config {
        socket: a.socket,
        policy: a.policy,
        log: a.log,
        pid_file: a.pid_file,
    };
    egress::proxy(config, a.user.as_deref(), a.detach)
}

/// `ateam exec`: a command in a member's container.
fn exec(g: &Global, a: ExecArgs) -> anyhow::Result<Exit> {
    let how = member::ExecMode {
        interactive: a.interactive,
        tty: a.tty,
    };
    block_on(member::exec(
        g,
        a.team.as_deref(),
        &a.member,
        how,
        &a.command,
    ))?
}

/// `ateam transcript`: an agent member's own transcript, rendered.
fn transcript(g: &Global, a: TranscriptArgs) -> anyhow::Result<Exit> {
    let opts = transcript::Opts {
        follow: a.follow,
        session: a.session,
        list: a.list,
        json: a.json,
    };
    transcript::run(g, a.team.as_deref(), &a.member, opts)
}

/// `ateam top`, on a runtime of one worker thread.
fn top(g: &Global, selector: Option<ateam::core::selector::Selector>) -> anyhow::Result<Exit> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    top::run(g, &rt, selector)
}

/// `ateam controller`: the flags as the daemon's options.
fn controller(g: &Global, a: ControllerFlags) -> anyhow::Result<Exit> {
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
fn logs(g: &Global, a: LogsFlags) -> anyhow::Result<Exit> {
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
