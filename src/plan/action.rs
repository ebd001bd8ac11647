//! One change the plan asks for: whom it is for (the subject, once) and what is done, grouped
//! by what it acts on. A new kind of action is a variant of one group: the group's own
//! matches (its name, its reason, its executor file, its words) are where it must be looked
//! at, and the matches over `Op` stay four arms long.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::sessions::ResumeEntry;
use super::spec::{DesiredMember, DesiredSession};
use crate::core::intercept::EgressPolicy;
use crate::core::session::Promotion;
use crate::model::RestartPolicy;
use crate::policy::Violation;

/// One change to make. Removing a container stops it first.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    /// The team it is for: actions are grouped, and their events kept, per team.
    pub team: String,
    /// The member, or the main session, it is for: the actions of one subject run in order.
    pub subject: String,
    /// What is done.
    pub op: Op,
}

/// What an action does, by what it acts on.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// The member's containers, through the engine.
    Container(ContainerOp),
    /// A process ateam runs on the host beside the member's container.
    Server(ServerOp),
    /// A main session: a person's terminal on the host.
    Session(SessionOp),
    /// What ateam keeps for the member on the host: its transcript folder, its tasks on the
    /// team's board.
    Host(HostOp),
    /// A whole team being deleted (`app::delete`), once its containers are gone: the subject
    /// is empty.
    Team(TeamOp),
}

/// What is done to a member's containers.
#[derive(Debug, Clone, PartialEq)]
pub enum ContainerOp {
    /// Make, verify and release a container for a member that has none.
    Create {
        /// The member, as the manifests want it.
        member: Box<DesiredMember>,
    },
    /// Replace a container that no longer matches what is wanted (the new one is released
    /// before the old one goes).
    Recreate {
        /// The member, as the manifests want it now.
        member: Box<DesiredMember>,
        /// The container it replaces.
        old: ContainerRef,
        /// Why.
        reason: Drift,
    },
    /// Start a stopped (or unverified) container, through the gate.
    Start {
        /// Which container: the one the engine listed, by name and id.
        container: ContainerRef,
        /// Why.
        reason: StartReason,
    },
    /// Remove a container (stopped first).
    Remove {
        /// Which container: the one the engine listed, by name and id.
        container: ContainerRef,
        /// Which kind of leftover it is: a stranger was never recorded, so nothing is forgotten.
        removal: Removal,
    },
    /// Give a verified replacement the member's name (its predecessor is gone).
    FinishReplacement {
        /// The replacement.
        container: ContainerRef,
        /// The name it takes.
        name: String,
    },
    /// Give the container its name back (someone renamed it).
    RestoreName {
        /// The renamed container.
        container: ContainerRef,
        /// The name it should have.
        name: String,
    },
    /// Let a container go on that someone paused.
    Unpause {
        /// The paused container.
        container: ContainerRef,
    },
    /// Stop a live container, as the person asked (`ateam rollback`: its workspace is rolled
    /// back under a stopped member). Never planned: the container stays, and the plan after
    /// it restarts the member as its restart policy says.
    Stop {
        /// The live container.
        container: ContainerRef,
    },
}

/// Why a container is removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// This store made it and no manifest wants it (with `--prune`, or a helper no longer
    /// wanted: `why` says more then).
    Orphan {
        /// Why it goes, when more is known than that no manifest wants it.
        why: Option<String>,
    },
    /// One of several containers this store made for one member: a leftover replacement, or
    /// all but the one kept.
    Duplicate,
    /// It carries ateam's labels but ateam did not make it (not in its record): with
    /// `--prune`, or because it holds the name the member's own container needs.
    Stranger,
    /// The person suspended its member (`ateam suspend`): the container goes, the member's
    /// state stays outside it.
    Suspended,
}

/// What is done to the processes ateam runs for a member on the host.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerOp {
    /// Start the member's allowlisting egress proxy (before its container starts).
    StartEgress {
        /// The unix socket it listens on, in the member's control folder.
        socket: PathBuf,
        /// What it lets through.
        policy: EgressPolicy,
    },
    /// Give a running egress proxy the member's new allowlist (no new container).
    UpdateEgress {
        /// The new allowlist.
        policy: EgressPolicy,
    },
    /// Stop the egress proxy of a member that no longer has an allowlist (or is gone), and
    /// remove its socket.
    StopEgress,
    /// Start the helper server of a member whose team allows helper requests.
    StartHelper,
    /// Stop the helper server of a member no longer wanted, or whose team turned requests
    /// off, and remove its socket.
    StopHelper,
}

/// What is done to a main session's terminal.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionOp {
    /// Start it (`resume`: the members of sessions it takes over, for its resume file, written
    /// when it first starts).
    Start {
        /// The session, as the manifests want it.
        session: Box<DesiredSession>,
        /// The members of sessions it takes over.
        resume: Vec<ResumeEntry>,
    },
    /// End one no manifest wants: one a session `takesOver`, or any with `--prune`.
    Stop {
        /// Its terminal's socket.
        socket: PathBuf,
        /// The session that takes it over, if that is why it ends.
        taken_over_by: Option<String>,
    },
    /// Turn the member of its name into it (`promotedFrom`): stop the member, move its
    /// transcript to the session's place, start the session, then remove the member's
    /// containers; each step recorded before the next (`journal`: where an interrupted
    /// promotion stopped, to go on from there).
    Promote {
        /// The session to promote to.
        session: Box<DesiredSession>,
        /// The member's containers, removed once the session runs.
        containers: Vec<ContainerRef>,
        /// Where an interrupted promotion stopped.
        journal: Option<Box<Promotion>>,
        /// As for `Start`, when the promoted session also takes over another.
        resume: Vec<ResumeEntry>,
    },
    /// Undo an interrupted promotion the manifests no longer ask for: stop the session if it
    /// got that far, move the transcript back to the member's place.
    RollBack {
        /// What the interrupted promotion recorded.
        journal: Box<Promotion>,
    },
}

/// What is done to what ateam keeps for a member on the host.
#[derive(Debug, Clone, PartialEq)]
pub enum HostOp {
    /// Make the member's transcript folder (mounted into its container).
    MakeTranscriptDir {
        /// The folder.
        path: PathBuf,
    },
    /// Return the tasks the member holds on its team's board (claimed, started) to `todo`: it
    /// is gone, its agent crashed, or its container is made again (`board`).
    ReturnTasks {
        /// Why, for the tasks' history.
        why: String,
    },
}

/// What is done to a team being deleted, after its containers are gone.
#[derive(Debug, Clone, PartialEq)]
pub enum TeamOp {
    /// Remove the team's own network (`network: open`), if it has one.
    RemoveNetwork {
        /// The network's name, as the engine knows it.
        name: String,
    },
    /// End the main sessions' terminals ateam started for it: the manifests' and any left
    /// running that they no longer name. Each is gone when this returns.
    StopSessions {
        /// Their terminals' sockets.
        sockets: Vec<PathBuf>,
    },
    /// Remove what the person asked gone with `--purge`: transcript folders, writers'
    /// workspaces and ateam's shadows of them.
    Purge {
        /// The folders and files.
        paths: Vec<PathBuf>,
    },
    /// Stop every helper server of the team.
    StopHelperServers,
    /// Clear the team's state folder: all of it with `all`, else all but what a person reads
    /// afterwards (its events, egress logs and board).
    ClearRunDir {
        /// The folder.
        path: PathBuf,
        /// Nothing kept (`--purge`).
        all: bool,
    },
}

impl From<TeamOp> for Op {
    fn from(op: TeamOp) -> Op {
        Op::Team(op)
    }
}

impl From<ContainerOp> for Op {
    fn from(op: ContainerOp) -> Op {
        Op::Container(op)
    }
}

impl From<ServerOp> for Op {
    fn from(op: ServerOp) -> Op {
        Op::Server(op)
    }
}

impl From<SessionOp> for Op {
    fn from(op: SessionOp) -> Op {
        Op::Session(op)
    }
}

impl From<HostOp> for Op {
    fn from(op: HostOp) -> Op {
        Op::Host(op)
    }
}

impl Action {
    /// `op` for `subject` of `team`.
    pub fn new(team: impl Into<String>, subject: impl Into<String>, op: impl Into<Op>) -> Action {
        Action {
            team: team.into(),
            subject: subject.into(),
            op: op.into(),
        }
    }

    /// `op` for member `m`.
    pub fn of(m: &DesiredMember, op: impl Into<Op>) -> Action {
        Action::new(&m.team, &m.member, op)
    }

    /// A container for `member`, which has none.
    pub fn create(member: DesiredMember) -> Action {
        let (team, subject) = (member.team.clone(), member.member.clone());
        let member = Box::new(member);
        Action::new(team, subject, ContainerOp::Create { member })
    }

    /// `op` for `session`.
    pub fn session(session: &DesiredSession, op: SessionOp) -> Action {
        Action::new(&session.team, &session.name, op)
    }

    /// `(team, member)`, or `(team, main session)`.
    pub fn subject(&self) -> (&str, &str) {
        (&self.team, &self.subject)
    }

    /// Whether it acts on a main session (a person's, on the host) rather than a member: a
    /// helper request brings up one member and may never touch these.
    pub fn is_session(&self) -> bool {
        matches!(self.op, Op::Session(_))
    }

    /// The container op, if it is one.
    pub fn container_op(&self) -> Option<&ContainerOp> {
        match &self.op {
            Op::Container(c) => Some(c),
            Op::Server(_) | Op::Session(_) | Op::Host(_) | Op::Team(_) => None,
        }
    }

    /// Its name, as the log, events and `diff -o json` say it.
    pub fn name(&self) -> &'static str {
        match &self.op {
            Op::Container(o) => o.name(),
            Op::Server(o) => o.name(),
            Op::Session(o) => o.name(),
            Op::Host(o) => o.name(),
            Op::Team(o) => o.name(),
        }
    }

    /// Why the plan wants it, as a short token: for a recreate the `kind` of its `Drift`,
    /// for a start the name of its `StartReason`.
    pub fn reason(&self) -> &'static str {
        match &self.op {
            Op::Container(o) => o.reason(),
            Op::Server(o) => o.reason(),
            Op::Session(o) => o.reason(),
            Op::Host(o) => o.reason(),
            Op::Team(_) => "teamDeleted",
        }
    }

    /// Whether it brings a member's container up (creates, recreates or starts it): what
    /// preflight checks before any change, and what a failure is kept as a failed start for.
    pub fn brings_up_member(&self) -> bool {
        matches!(
            self.op,
            Op::Container(
                ContainerOp::Create { .. }
                    | ContainerOp::Recreate { .. }
                    | ContainerOp::Start { .. }
            )
        )
    }

    /// The member it creates or recreates, as the manifests want it.
    pub fn made(&self) -> Option<&DesiredMember> {
        match self.container_op()? {
            ContainerOp::Create { member } | ContainerOp::Recreate { member, .. } => Some(member),
            ContainerOp::Start { .. }
            | ContainerOp::Remove { .. }
            | ContainerOp::FinishReplacement { .. }
            | ContainerOp::RestoreName { .. }
            | ContainerOp::Unpause { .. }
            | ContainerOp::Stop { .. } => None,
        }
    }

    /// The container it acts on, when one exists before it runs.
    pub fn container(&self) -> Option<&ContainerRef> {
        self.container_op()?.container()
    }
}

impl ContainerOp {
    fn name(&self) -> &'static str {
        match self {
            ContainerOp::Create { .. } => "create",
            ContainerOp::Recreate { .. } => "recreate",
            ContainerOp::Start { .. } => "start",
            ContainerOp::Remove { removal, .. } => match removal {
                Removal::Orphan { .. } => "removeOrphan",
                Removal::Duplicate => "removeDuplicate",
                Removal::Stranger => "removeStranger",
                Removal::Suspended => "removeSuspended",
            },
            ContainerOp::FinishReplacement { .. } => "finishReplacement",
            ContainerOp::RestoreName { .. } => "restoreName",
            ContainerOp::Unpause { .. } => "unpause",
            ContainerOp::Stop { .. } => "stop",
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            ContainerOp::Create { .. } => "missing",
            ContainerOp::Recreate { reason, .. } => reason.kind(),
            ContainerOp::Start { reason, .. } => reason.name(),
            ContainerOp::Remove { removal, .. } => match removal {
                Removal::Orphan { .. } => "noManifestWantsIt",
                Removal::Duplicate => "duplicate",
                Removal::Stranger => "notMadeByAteam",
                Removal::Suspended => "suspended",
            },
            ContainerOp::FinishReplacement { .. } => "interruptedReplacement",
            ContainerOp::RestoreName { .. } => "renamed",
            ContainerOp::Unpause { .. } => "paused",
            ContainerOp::Stop { .. } => "workspaceRollback",
        }
    }

    /// The container it acts on, when one exists before it runs.
    pub fn container(&self) -> Option<&ContainerRef> {
        match self {
            ContainerOp::Create { .. } => None,
            ContainerOp::Recreate { old, .. } => Some(old),
            ContainerOp::Start { container, .. }
            | ContainerOp::Remove { container, .. }
            | ContainerOp::FinishReplacement { container, .. }
            | ContainerOp::RestoreName { container, .. }
            | ContainerOp::Unpause { container }
            | ContainerOp::Stop { container } => Some(container),
        }
    }
}

impl ServerOp {
    fn name(&self) -> &'static str {
        match self {
            ServerOp::StartEgress { .. } => "startEgressProxy",
            ServerOp::UpdateEgress { .. } => "updateEgressPolicy",
            ServerOp::StopEgress => "stopEgressProxy",
            ServerOp::StartHelper => "startHelperServer",
            ServerOp::StopHelper => "stopHelperServer",
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            ServerOp::StartEgress { .. } | ServerOp::StartHelper => "notRunning",
            ServerOp::UpdateEgress { .. } => "allowListChanged",
            ServerOp::StopEgress => "noAllowList",
            ServerOp::StopHelper => "noHelperRequests",
        }
    }
}

impl SessionOp {
    fn name(&self) -> &'static str {
        match self {
            SessionOp::Start { .. } => "startSession",
            SessionOp::Stop { .. } => "stopSession",
            SessionOp::Promote { .. } => "promote",
            SessionOp::RollBack { .. } => "rollBackPromotion",
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            SessionOp::Start { .. } => "notRunning",
            SessionOp::Stop {
                taken_over_by: Some(_),
                ..
            } => "takenOver",
            SessionOp::Stop { .. } => "noManifestWantsIt",
            SessionOp::Promote { .. } => "promotedFrom",
            SessionOp::RollBack { .. } => "promotionNoLongerWanted",
        }
    }
}

impl HostOp {
    fn name(&self) -> &'static str {
        match self {
            HostOp::MakeTranscriptDir { .. } => "makeTranscriptDir",
            HostOp::ReturnTasks { .. } => "returnTasks",
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            HostOp::MakeTranscriptDir { .. } => "missing",
            HostOp::ReturnTasks { .. } => "holderLeft",
        }
    }
}

impl TeamOp {
    fn name(&self) -> &'static str {
        match self {
            TeamOp::RemoveNetwork { .. } => "removeNetwork",
            TeamOp::StopSessions { .. } => "stopSessions",
            TeamOp::Purge { .. } => "purge",
            TeamOp::StopHelperServers => "stopHelperServers",
            TeamOp::ClearRunDir { .. } => "clearRunDir",
        }
    }
}

/// A container the plan refers to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRef {
    /// The engine's id of the container.
    pub id: String,
    /// Its name, as the engine reports it.
    pub name: String,
}

/// Why a member's container must be replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Drift {
    /// The manifest changed: these fields differ.
    Spec {
        /// The fields that differ.
        changes: Vec<FieldChange>,
    },
    /// The spec hash differs but the old spec is unknown (label missing or unreadable).
    SpecHash {
        /// The container's spec hash.
        from: String,
        /// The wanted spec's hash.
        to: String,
    },
    /// Someone changed the container outside ateam.
    Policy {
        /// What differs from what ateam set.
        violations: Vec<Violation>,
    },
    /// The engine marks the container dead; it cannot be started again.
    Dead,
    /// The person asked for a new container (`ateam restart`, `top`'s `r`).
    Asked,
}

impl Drift {
    /// Its `kind`, as in its JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Drift::Spec { .. } => "spec",
            Drift::SpecHash { .. } => "specHash",
            Drift::Policy { .. } => "policy",
            Drift::Dead => "dead",
            Drift::Asked => "asked",
        }
    }
}

/// One field whose value differs between the old spec and the new.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldChange {
    /// Its dotted path in the spec (`env.FOO`).
    pub field: String,
    /// The old value (`null` when it was absent).
    pub from: Value,
    /// The new value (`null` when it is absent).
    pub to: Value,
}

/// Why a member's existing container is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StartReason {
    /// Created but never started (for example, an apply that was interrupted).
    NeverStarted,
    /// Exited with this code and the restart policy asks for a restart.
    Restart {
        /// The exit code.
        code: i64,
        /// The policy that asks for the restart.
        policy: RestartPolicy,
    },
    /// Running, but an interrupted apply never verified it nor released its gate: check it
    /// now, then release.
    NotReleased,
    /// Its agent ended, and its team's board has news for it: its next task is to read it
    /// (`core::agents::WAKE_TASK`).
    Board {
        /// Unread messages to it.
        messages: usize,
        /// Tasks for it still to do.
        tasks: usize,
        /// What it is woken for (`board::store::News::mark`).
        mark: (u64, u64),
    },
}

impl StartReason {
    /// Its name, as in its JSON.
    pub fn name(&self) -> &'static str {
        match self {
            StartReason::NeverStarted => "neverStarted",
            StartReason::Restart { .. } => "restart",
            StartReason::NotReleased => "notReleased",
            StartReason::Board { .. } => "board",
        }
    }
}
