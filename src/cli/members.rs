//! The arguments of the commands that act on one member: run in it, read it, its workspace,
//! and its lifecycle (restart, suspend, resume, fork, its next task).

use clap::Args;

/// `ateam exec`: its arguments.
#[derive(Debug, Args)]
pub struct ExecArgs {
    pub member: String,
    #[arg(long)]
    pub team: Option<String>,
    /// Keep stdin open (for a shell: `-it`). Runs the engine's own CLI, which must be
    /// installed (`docker` or `podman`).
    #[arg(short, long)]
    pub interactive: bool,
    /// Give the command a terminal.
    #[arg(short, long)]
    pub tty: bool,
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `ateam transcript`: its arguments.
#[derive(Debug, Args)]
pub struct TranscriptArgs {
    /// An agent member (one with `agent:` in its manifest).
    pub member: String,
    /// Its team, when several teams have a member of that name.
    #[arg(long)]
    pub team: Option<String>,
    /// Keep printing what the agent writes, until interrupted; a newer session is
    /// followed when one begins (unless --session).
    #[arg(short, long)]
    pub follow: bool,
    /// Which session: its id, or part of it, as --list shows it.
    #[arg(long)]
    pub session: Option<String>,
    /// List the agent's sessions, newest first.
    #[arg(long, conflicts_with_all = ["follow", "session"])]
    pub list: bool,
    /// As JSON: one document (its tasks and items); with -f, one object per line.
    #[arg(long)]
    pub json: bool,
}

/// `ateam changes`: its arguments.
#[derive(Debug, Args)]
pub struct ChangesArgs {
    pub member: String,
    #[arg(long)]
    pub team: Option<String>,
    /// Also print the diff from the base to the work tree.
    #[arg(long)]
    pub diff: bool,
    /// As JSON.
    #[arg(long)]
    pub json: bool,
}

/// `ateam collect`: its arguments.
#[derive(Debug, Args)]
pub struct CollectArgs {
    pub member: String,
    #[arg(long)]
    pub team: Option<String>,
    #[arg(long)]
    pub into: Option<String>,
}

/// `ateam snapshots`: its arguments.
#[derive(Debug, Args)]
pub struct SnapshotsArgs {
    pub member: String,
    #[arg(long)]
    pub team: Option<String>,
}

/// `ateam rollback`: its arguments.
#[derive(Debug, Args)]
pub struct RollbackArgs {
    pub member: String,
    #[arg(long)]
    pub team: Option<String>,
    /// A snapshot's id, as `ateam snapshots` lists it.
    #[arg(long)]
    pub to: Option<String>,
}

/// `ateam reset`: its arguments.
#[derive(Debug, Args)]
pub struct ResetArgs {
    pub member: String,
    #[arg(long)]
    pub team: Option<String>,
}

/// `ateam restart`: its arguments.
#[derive(Debug, Args)]
pub struct RestartArgs {
    pub member: String,
    #[arg(long)]
    pub team: Option<String>,
    #[arg(long)]
    pub no_wait: bool,
}

/// `ateam suspend`: its arguments.
#[derive(Debug, Args)]
pub struct SuspendArgs {
    pub member: String,
    #[arg(long)]
    pub team: Option<String>,
    #[arg(long)]
    pub no_wait: bool,
    /// Suspend without keeping its HOME (for an image without `tar`).
    #[arg(long)]
    pub discard_home: bool,
}

/// `ateam resume`: its arguments.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    pub member: String,
    #[arg(long)]
    pub team: Option<String>,
    #[arg(long)]
    pub no_wait: bool,
}

/// `ateam fork`: its arguments.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The member to fork.
    #[arg(required_unless_present = "drop", requires = "new")]
    pub member: Option<String>,
    /// The fork's name.
    #[arg(long = "as", value_name = "NEW")]
    pub new: Option<String>,
    /// Remove the fork NAME instead: its container goes, its copies and transcript stay.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["member", "new"])]
    pub drop: Option<String>,
    #[arg(long)]
    pub team: Option<String>,
    /// The most that is copied, all folders together (a quantity: 512Mi, 4Gi).
    #[arg(long, default_value = "4Gi")]
    pub max_copy: String,
    #[arg(long)]
    pub no_wait: bool,
}

/// `ateam task`: its arguments.
#[derive(Debug, Args)]
pub struct TaskArgs {
    pub member: String,
    /// What the agent is to do next.
    pub task: String,
    #[arg(long)]
    pub team: Option<String>,
    /// Wait for the task to end, and exit with the agent's exit code.
    #[arg(long)]
    pub wait: bool,
}
