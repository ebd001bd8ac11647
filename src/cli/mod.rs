//! Command-line arguments (clap types only; the work is in `commands`).

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

use ateam::core::selector::Selector;

mod members;
pub use members::*;

#[derive(Debug, Parser)]
#[command(
    name = "ateam",
    version,
    about = "Declarative controller for local containers running teams of AI coding agents"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// `ateam login ...`.
#[derive(Debug, Subcommand)]
pub enum LoginCommand {
    /// Make a login of this machine ateam's: read the agent's own credentials (or a token),
    /// refresh it at once (so the copy it was read from is spent, and one owner is left),
    /// and keep it, 0600, in ateam's state folder.
    Import {
        /// Whose login.
        agent: LoginAgent,
        /// The agent's file (default `~/.claude/.credentials.json`, or `$CODEX_HOME/auth.json`,
        /// `~/.codex/auth.json`); `-` reads it, or a token of `claude setup-token`, from stdin.
        #[arg(long)]
        from: Option<PathBuf>,
        /// Where the login is refreshed, if not the vendor's (a gateway, a test's stand-in).
        #[arg(long, value_name = "URL")]
        token_url: Option<String>,
        /// A PEM file of CA certificates trusted for --token-url besides this machine's.
        #[arg(long, value_name = "PEM")]
        token_ca: Option<PathBuf>,
        /// Keep it as it is: no refresh now (the copy it was read from stays valid until one
        /// of the two owners refreshes).
        #[arg(long)]
        no_refresh: bool,
    },
    /// Each login: where it came from, when its token ends, its refreshes and the last error.
    Status {
        /// `json`: one object per login.
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Refresh a login now (ateam does it by itself ahead of expiry).
    Refresh {
        /// Whose login.
        agent: LoginAgent,
    },
    /// Forget a login (members that use it then fail to start).
    Remove {
        /// Whose login.
        agent: LoginAgent,
    },
}

/// The agents whose subscription logins ateam can keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LoginAgent {
    /// Claude Code's Claude login.
    Claude,
    /// Codex CLI's ChatGPT login.
    Codex,
}

/// Options every command understands.
#[derive(Debug, Args)]
pub struct Global {
    /// ateam's state folder (last applied manifests, locks, private files).
    #[arg(long, global = true, env = "ATEAM_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Container engine; default: the Team's `backend`, else the first that answers.
    #[arg(long, global = true, value_enum)]
    pub backend: Option<BackendArg>,
}

/// How much ateam logs, and in which format. Logs go to stderr only: stdout is the command's
/// output (`status -o json` stays one clean JSON document). A reusable group: any command that
/// installs logging (`crate::logging::init`) flattens it.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// Log more: -v info, -vv debug, -vvv trace (for a command whose default is warn).
    ///
    /// Each -v is one level past the command's default, for ateam's own events; other crates
    /// stay at warn. RUST_LOG, when set, replaces -v and -q entirely (an EnvFilter:
    /// `RUST_LOG=debug`, `RUST_LOG=warn,ateam=trace,bollard=debug`).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Log errors only.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// `text` for people; `json` for log collectors (one object per line).
    #[arg(
        long,
        value_enum,
        value_name = "FORMAT",
        global = true,
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BackendArg {
    Auto,
    Docker,
    Podman,
}

/// Where manifests come from.
#[derive(Debug, Args)]
pub struct Files {
    /// Manifest files or folders (recursive: *.yaml, *.yml); `-` reads stdin. Repeatable.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
}

/// Manifests, when a command may also work from the applied state.
#[derive(Debug, Args)]
pub struct OptionalFiles {
    /// Compare against these manifests instead of the last applied ones.
    #[arg(short = 'f', long = "filename", num_args = 1..)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
    Yaml,
}

/// How `validate --show` prints the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShowFormat {
    /// YAML, for people.
    Yaml,
    /// JSON, for scripts.
    Json,
}

/// `ateam agents ...`.
#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Put an agent's build in the cache now: fetched with `npm pack` (or taken from a
    /// tarball with --from), checked against its pinned SHA-256, its files unpacked.
    Pull {
        /// `claude` or `codex`.
        name: String,
        /// Its version; default the one ateam pins.
        #[arg(long)]
        version: Option<String>,
        /// The SHA-256 of that version's npm tarball (needed for a version ateam does not pin).
        #[arg(long)]
        sha256: Option<String>,
        /// The npm tarball, fetched elsewhere (`npm pack SPEC`), instead of npm.
        #[arg(long, value_name = "FILE.tgz")]
        from: Option<PathBuf>,
    },
}

/// Which schema `ateam schema` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchemaOf {
    Manifests,
    Status,
    Diff,
}

/// `ateam approvals allow|deny ID`.
#[derive(Debug, Subcommand)]
pub enum ApprovalAnswer {
    /// Let it through: `--once` for the member's present start, `--always` written into the
    /// grant's manifest file and applied (no new container).
    Allow {
        /// The approval's id, as `ateam approvals` lists it.
        id: String,
        #[command(flatten)]
        how: OnceOrAlways,
    },
    /// Keep it refused: `--once` dismisses it (a later refusal asks again), `--always` is
    /// written into the grant's `deny` list and never asked again.
    Deny {
        /// The approval's id, as `ateam approvals` lists it.
        id: String,
        #[command(flatten)]
        how: OnceOrAlways,
    },
}

/// `--once` or `--always`: one of the two, said each time.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct OnceOrAlways {
    /// For this time only.
    #[arg(long)]
    pub once: bool,
    /// Written into the manifest.
    #[arg(long)]
    pub always: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check manifests against every rule without touching anything.
    Validate {
        #[command(flatten)]
        files: Files,
        /// Print the resolved model (paths, defaults, what an `agent:` expands to) when valid:
        /// as YAML, or `--show=json`.
        #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "yaml")]
        show: Option<ShowFormat>,
    },
    /// Print a JSON Schema: of the manifests (for editors: yaml-language-server), or of the
    /// documents `status` and `diff` print with -o json|yaml.
    Schema {
        #[arg(value_enum, default_value_t = SchemaOf::Manifests)]
        of: SchemaOf,
    },
    /// Make the machine match the manifests, and wait until the members run.
    Apply(ApplyArgs),
    /// Show what apply would change. Exit 0: no change, 1: changes or drift, 2+: error.
    Diff(DiffArgs),
    /// What runs, what drifted, where each transcript is.
    Status(StatusArgs),
    /// What apply and the controller did and why (created, replaced because ..., restarted
    /// after exit N, crash-loop backoff, strangers, refused egress and helper requests),
    /// newest last.
    Events(EventsArgs),
    /// What members were refused that you could grant (pending approvals), and your
    /// answers: allow or deny, once or always (docs/approvals.md).
    Approvals(ApprovalsArgs),
    /// Stop and remove a team's containers; transcripts stay unless --purge.
    Delete(DeleteArgs),
    /// The agents' native builds that ateam brings into members with `agent:` (kept in
    /// ~/.cache/ateam/agents; apply fetches a missing one itself).
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// Keep the machine matching the manifests: watch them and the engine, heal, resync.
    ///
    /// Runs until SIGINT or SIGTERM (a second one stops at once). One controller per state
    /// folder; `ateam apply` beside it works (the same lock). Logs at info by default.
    Controller(ControllerFlags),
    /// Print a member's output.
    Logs(LogsFlags),
    /// Write a team as it now stands, helpers its members asked for included, as manifests
    /// a person can check in (they pass `validate`, and an apply of them changes nothing).
    Export {
        /// The applied team.
        #[arg(long)]
        team: String,
        /// Write to this file (0600) instead of stdout.
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
    },
    /// Give a team's intercepted egress a new CA: new certificates for every proxy, the new
    /// CA in every member's bundle, no new container (see docs/egress.md).
    RotateCa {
        /// The applied team.
        #[arg(long)]
        team: String,
    },
    /// The person's Claude or ChatGPT login, which members use without ever holding it:
    /// ateam owns and refreshes it, each member's proxy injects it (docs/agents.md).
    #[command(subcommand)]
    Login(LoginCommand),
    /// Refreshes the logins in use and hands proxies the new tokens (started by apply; not
    /// for people to run).
    #[command(hide = true)]
    LoginKeeper,
    /// A member's helper-request server (started by apply; not for people to run).
    #[command(hide = true)]
    HelperServer(HelperServerArgs),
    /// A member's egress proxy (started by apply; not for people to run).
    #[command(hide = true)]
    EgressProxy(EgressProxyArgs),
    /// Run a command in a member's container, as the member's user.
    Exec(ExecArgs),
    /// What an agent member did: its own transcript (Claude Code's session, Codex's rollout),
    /// rendered: each task, what the agent said, each tool call and what came back, its
    /// errors, and how each task ended (done, or failed and why). Everything the member wrote
    /// is shown escaped. The newest session unless --session (docs/agents.md).
    Transcript(TranscriptArgs),
    /// What a writer did in its workspace: commits ahead of its base, files not committed,
    /// and with --diff the diff from its base (docs/workspaces.md).
    Changes(ChangesArgs),
    /// Bring a writer's branch into your repository as refs/ateam/<team>/<member> (nothing
    /// is checked out); with --into, also fast-forward (or make) that branch.
    Collect(CollectArgs),
    /// List the snapshots of a writer's workspace, the newest first (one before every start).
    Snapshots(SnapshotsArgs),
    /// Put a writer's workspace back as a snapshot recorded it (the newest by default), after
    /// a snapshot of the present; the member is stopped first.
    Rollback(RollbackArgs),
    /// Put a writer's workspace back at its base (after a snapshot of the present); the
    /// member is stopped first.
    Reset(ResetArgs),
    /// Give a member a new container, judged whole (secrets, image, folders) and checked at
    /// its gate before the old one goes: a restart that cannot bring it back changes nothing.
    /// Its transcript, grants and workspace stay; a one-shot member runs its command again.
    Restart(RestartArgs),
    /// Take a member down with its state kept, its memory freed: its HOME written into its
    /// transcript folder, its container removed, its proxy stopped; apply and the controller
    /// keep it down until `ateam resume` (docs/suspend.md).
    Suspend(SuspendArgs),
    /// Bring a suspended member back: a new container judged whole and checked at its gate,
    /// its HOME put back before its command runs.
    Resume(ResumeArgs),
    /// Make a second member from a running one: its own copies of the write grants, the
    /// transcript folder and HOME, a new name, its own container, proxy and credentials,
    /// through its gate; the origin runs on. `--drop NAME` removes a fork (its copies stay).
    Fork(ForkArgs),
    /// Give an agent member its next task, in its own session (the agent's resume), in the
    /// same container, through the same gate; a running agent finishes its current task
    /// first. The manifest's `agent.task` is its first task only.
    Task(TaskArgs),
    /// The team's tasks (its board, `board: true`): list them, or change them as the person,
    /// who may act on any task (docs/teams.md).
    Tasks(TasksArgs),
    /// The team's messages (its board): the latest, or send one as the person.
    Messages(MessagesArgs),
    /// The team's tools (team_task, team_message) for a main session's agent: an MCP
    /// server on standard input and output, acting as that main session.
    Mcp {
        /// The team (default: $ATEAM_TEAM, else the only team with a board).
        #[arg(long, env = "ATEAM_TEAM")]
        team: Option<String>,
        /// The main session it acts as (default: $ATEAM_NAME, which ateam sets in each).
        #[arg(long, env = "ATEAM_NAME")]
        session: String,
    },
    /// Join a main session's terminal (its tmux session), an interactive agent's terminal, or
    /// follow a member's console.
    ///
    /// The way out is printed first: tmux's detach key (Ctrl-b d) leaves the session running;
    /// Ctrl-] leaves an interactive agent running; another member's console is read-only (it
    /// has no stdin) and Ctrl-C leaves it.
    Attach {
        /// A main session or a member.
        name: String,
        #[arg(long)]
        team: Option<String>,
    },
    /// A live dashboard of every team: state, restarts, CPU, memory, pids, egress, activity;
    /// the selected member's output, egress decisions and newest transcript file; keys to
    /// attach, open a shell, restart and filter (`?` lists them). Changes nothing unasked.
    Top {
        /// Only main sessions and members whose labels match (`/` changes it).
        #[arg(short = 'l', long, value_parser = Selector::parse)]
        selector: Option<Selector>,
    },
    /// Check this machine for what ateam needs: engines, rootless setup, cgroups, tmux,
    /// images, memory. Exit 0: all ok (warnings allowed), 1: something fails.
    Doctor {
        /// Also check what these manifests need (their images on their engine, their memory).
        #[arg(short = 'f', long = "filename", num_args = 1..)]
        files: Vec<PathBuf>,
        #[arg(short = 'o', long, value_enum, default_value = "text")]
        output: DoctorOutput,
    },
    /// Print a shell completion script (bash: `source <(ateam completion bash)`).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print ateam's man page (roff), or write one page per command into a folder.
    ///
    /// `ateam man | man -l -` reads it; `ateam man --dir /usr/local/share/man/man1` installs
    /// ateam.1 and ateam-<command>.1.
    Man {
        /// Write ateam.1 and a page per command here instead of printing ateam.1.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// `ateam apply`: its arguments.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub files: Files,
    /// Remove ateam containers of these teams that no manifest wants.
    #[arg(long)]
    pub prune: bool,
    /// Show what would change (as `diff`) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Members brought up at once; default min(8, 2 x CPUs).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Fail at once if another apply holds the store, instead of waiting.
    #[arg(long)]
    pub no_wait: bool,
    /// A learning run for this long (at most 1h: `10m`): members get past their allow
    /// lists for what you could approve (never a local, private or metadata address, an
    /// ssh or database port, nor past a parent's list or a deny), each logged as an ask;
    /// then `ateam approvals --proposal` shows the grants that cover what was used.
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "dry_run")]
    pub learn: Option<std::time::Duration>,
}

/// `ateam diff`: its arguments.
#[derive(Debug, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub files: Files,
    #[arg(long)]
    pub prune: bool,
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
}

/// `ateam status`: its arguments.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only this team.
    pub team: Option<String>,
    #[command(flatten)]
    pub files: OptionalFiles,
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
    /// Exit 1 when anything differs from the manifests (for CI; as diff judges drift).
    #[arg(long)]
    pub exit_code: bool,
    /// Only main sessions and members whose labels match (`role=review,tier!=x,key`);
    /// the verdict is theirs alone.
    #[arg(short = 'l', long, value_parser = Selector::parse)]
    pub selector: Option<Selector>,
    /// Print again each time something changes, until interrupted (as `kubectl get -w`);
    /// with -o json one document per line.
    #[arg(short = 'w', long, conflicts_with = "exit_code")]
    pub watch: bool,
}

/// `ateam approvals`: its arguments.
#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    /// Only this team's.
    #[arg(long)]
    pub team: Option<String>,
    /// `json`: one array of every pending approval.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
    /// Print, as a diff of the manifests, the grants that would allow every approvable
    /// ask (after `apply --learn`: what the members used); nothing is written.
    #[arg(long)]
    pub proposal: bool,
    #[command(subcommand)]
    pub answer: Option<ApprovalAnswer>,
}

/// `ateam delete`: its arguments.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub files: OptionalFiles,
    /// The team to delete (from the applied state).
    #[arg(long, conflicts_with = "files")]
    pub team: Option<String>,
    /// Every applied team whose Team labels match (`env=dev`).
    #[arg(short = 'l', long, value_parser = Selector::parse, conflicts_with_all = ["files", "team"])]
    pub selector: Option<Selector>,
    /// Also delete the members' transcripts.
    #[arg(long)]
    pub purge: bool,
    #[arg(long)]
    pub no_wait: bool,
}

/// `ateam events`: its arguments.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only this team (default: every team of the state folder).
    pub team: Option<String>,
    /// Keep printing new events as they come, until interrupted.
    #[arg(short, long)]
    pub watch: bool,
    /// `json`: one array; with -w, one object per line per event.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
}

/// `ateam tasks`: its arguments.
#[derive(Debug, Args)]
pub struct TasksArgs {
    #[command(subcommand)]
    pub action: Option<TasksAction>,
    #[arg(long, global = true)]
    pub team: Option<String>,
    /// As JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `ateam messages`: its arguments.
#[derive(Debug, Args)]
pub struct MessagesArgs {
    #[command(subcommand)]
    pub action: Option<MessagesAction>,
    #[arg(long, global = true)]
    pub team: Option<String>,
    /// As JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// How many of the latest.
    #[arg(short = 'n', long, default_value_t = 20, global = true)]
    pub last: usize,
}

/// `ateam helper-server`: its arguments.
#[derive(Debug, Args)]
pub struct HelperServerArgs {
    #[arg(long)]
    pub team: String,
    #[arg(long)]
    pub member: String,
    /// UID:GID the socket belongs to (the member's user).
    #[arg(long)]
    pub socket_owner: String,
}

/// `ateam egress-proxy`: its arguments.
#[derive(Debug, Args)]
pub struct EgressProxyArgs {
    #[arg(long)]
    pub socket: PathBuf,
    #[arg(long)]
    pub policy: PathBuf,
    #[arg(long)]
    pub log: PathBuf,
    #[arg(long)]
    pub pid_file: PathBuf,
    /// UID:GID to run as, when started as root.
    #[arg(long)]
    pub user: Option<String>,
    /// Start the proxy in the background and return.
    #[arg(long)]
    pub detach: bool,
}

/// `doctor -o`: a table for people, or JSON for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DoctorOutput {
    Text,
    Json,
}

/// `--since`: an age before now (`10m`) or an RFC 3339 time; seconds since the epoch.
fn parse_since(text: &str) -> Result<i64, String> {
    let when = match humantime::parse_duration(text) {
        Ok(age) => std::time::SystemTime::now()
            .checked_sub(age)
            .ok_or_else(|| format!("`{text}` is before the epoch"))?,
        Err(_) => humantime::parse_rfc3339_weak(text)
            .map_err(|_| format!("`{text}` is neither an age (10m, 2h) nor an RFC 3339 time"))?,
    };
    let secs = when
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("`{text}` is before the epoch"))?
        .as_secs();
    i64::try_from(secs).map_err(|e| e.to_string())
}

/// `ateam controller`'s flags (apart, so the verb's handler takes them as one value).
#[derive(Debug, Args)]
pub struct ControllerFlags {
    #[command(flatten)]
    pub files: Files,
    /// Remove what no manifest wants: members, strangers, teams whose manifests are gone.
    #[arg(long)]
    pub prune: bool,
    /// Look at everything again this often, for what sends no signal (a cgroup file or a
    /// folder changed by hand). Deaths, engine changes, manifest edits and silent egress
    /// proxies are each seen within about a second without it.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub resync: std::time::Duration,
    /// Reconcile everything once and exit (for cron and CI): 0 converged, 1 not.
    #[arg(long)]
    pub once: bool,
    /// First delay of the crash-loop backoff (doubling up to 5 min, reset after 10 min
    /// of running).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub crash_backoff: std::time::Duration,
    /// A member that ran this long before it exited starts a new count (no delay).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub crash_reset: std::time::Duration,
    /// Members brought up at once within a team; default min(8, 2 x CPUs).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Serve Prometheus metrics at http://ADDR/metrics: a loopback address
    /// (127.0.0.1:9464, [::1]:9464, localhost:9464) unless --metrics-allow-remote.
    #[arg(long, value_name = "ADDR", conflicts_with = "once")]
    pub metrics: Option<String>,
    /// Let --metrics listen on a non-loopback address (the figures name your teams and
    /// members: anyone who can reach it reads them).
    #[arg(long, requires = "metrics")]
    pub metrics_allow_remote: bool,
}

/// `ateam logs`' flags.
#[derive(Debug, Args)]
pub struct LogsFlags {
    #[arg(required_unless_present = "selector", conflicts_with = "selector")]
    pub member: Option<String>,
    #[arg(long)]
    pub team: Option<String>,
    /// Lines from the end.
    #[arg(long, default_value_t = 100)]
    pub tail: usize,
    /// Keep printing new output until the member stops.
    #[arg(short, long, conflicts_with = "egress")]
    pub follow: bool,
    /// Every member whose labels match, each line prefixed with `[member]` (instead of
    /// MEMBER; not with -f).
    #[arg(short = 'l', long, value_parser = Selector::parse, conflicts_with = "follow")]
    pub selector: Option<Selector>,
    /// Only output newer than this: an age (`10m`, `2h`) or an RFC 3339 time.
    #[arg(long, value_parser = parse_since)]
    pub since: Option<i64>,
    /// Prefix each line with the time the engine received it (RFC 3339).
    #[arg(short = 't', long)]
    pub timestamps: bool,
    /// The member's egress instead: connections its proxy allowed and refused.
    #[arg(long)]
    pub egress: bool,
}

/// What `ateam tasks` does.
#[derive(Debug, Subcommand)]
pub enum TasksAction {
    /// One task, whole, with its history.
    Show { id: u64 },
    /// A new task.
    Add {
        title: String,
        #[arg(long, default_value = "")]
        body: String,
        /// The session it is for.
        #[arg(long = "for")]
        owner: Option<String>,
        /// Tasks that must be done first.
        #[arg(long)]
        after: Vec<u64>,
    },
    /// Mark a task done.
    Done {
        id: u64,
        #[arg(long)]
        note: Option<String>,
    },
    /// Give a claimed or started task back to todo.
    Release {
        id: u64,
        #[arg(long)]
        note: Option<String>,
    },
    /// Put a done task back to todo.
    Reopen {
        id: u64,
        #[arg(long)]
        note: Option<String>,
    },
}

/// What `ateam messages` does.
#[derive(Debug, Subcommand)]
pub enum MessagesAction {
    /// Send a message as the person.
    Send {
        body: String,
        /// Who is told (none: everyone).
        #[arg(long)]
        to: Vec<String>,
    },
}
