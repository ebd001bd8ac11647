//! Where everything of ateam's lives on disk: the one module that knows the state folder's
//! layout. Every other module asks here.
//!
//! ```text
//! <state>/lock                                      flock'ed by apply and delete
//! <state>/controller.lock, controller.json          the running controller, its record
//! <state>/gate/                                     the start gate, shared by hard links
//! <state>/engines.json                              what each engine said of itself (a cache)
//! <state>/images/<id>.json                          what a probe found in an image (by id)
//! <state>/teams/<team>/applied.json                 the validated model last applied
//! <state>/teams/<team>/engine.json                  the engine it was applied on
//! <state>/teams/<team>/events.jsonl                 what apply and the controller did, and
//!                                                   why (`ateam events`); rotated to `.1`
//! <state>/teams/<team>/deleted.json                 after a delete without --purge: the team
//!                                                   as it was, so --purge finds its transcripts
//! <state>/teams/<team>/deleted-at                  the person deleted it then: a controller
//!                                                   running since before leaves it deleted
//! <state>/teams/<team>/egress-ca/ca.pem, ca.key     the team's CA for intercepted egress
//! <state>/teams/<team>/members/<m>/ctl/             the member's gate, secrets, release file
//!                                                   (`go`), restart count (`restarts`), CA
//!                                                   files (`ca.pem`, `ca-bundle.pem`)
//! <state>/teams/<team>/members/<m>/containers.json  ids of the containers ateam made
//! <state>/teams/<team>/members/<m>/approvals.json   the person's answers to its approvals
//! <state>/teams/<team>/members/<m>/suspended.json   `ateam suspend`: since when, its HOME
//! <state>/teams/<team>/members/<m>/resume.json      `ateam resume`: HOME to put back at start
//! <state>/teams/<team>/members/<m>/ctl/egress.sock  its egress proxy's socket (mounted with ctl/)
//! <state>/teams/<team>/members/<m>/egress/          the proxy's allowlist, pid file, log,
//!                                                   refusal log (`log-refused.jsonl`),
//!                                                   stderr, intercept.json, image-roots.pem,
//!                                                   once.json (allowed for this start only)
//! <state>/teams/<team>/members/<m>/ctl/helpers.sock its helper server's socket (helperRequests)
//! <state>/teams/<team>/members/<m>/ctl/mcp.sock     the team's tools (MCP), served by the
//!                                                   helper server (`board: true`)
//! <state>/teams/<team>/board/                       the team's board (`board::store`)
//! <state>/teams/<team>/members/<m>/helpers/         the helper server's pid file and stderr
//! <state>/teams/<team>/requested/<name>.json        a helper a member asked for (the member)
//! <state>/teams/<team>/sessions/<s>/tmux.sock       a main session's terminal
//! <state>/teams/<team>/sessions/<s>/started         when ateam started it (for `status`)
//! <state>/teams/<team>/sessions/<s>/promotion.json  a promotion's steps, until it is done
//! <state>/logins/<kind>.json                        a subscription login (`ateam login`),
//!                                                   0600; `lock` guards every change
//! <state>/logins/keeper.lock, .pid, .err            the login keeper (refreshes them)
//! ```

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// An id for a state folder, so that two stores on one machine never touch each other's
/// containers.
pub fn store_id(state_dir: &Path) -> String {
    let digest = Sha256::digest(state_dir.as_os_str().as_encoded_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// What probes found in the image of this id (`runtime::image::Probe`); none for an id that
/// is not a plain digest.
pub(crate) fn image_probe_path(state_dir: &Path, image_id: &str) -> Option<PathBuf> {
    let id = image_id.strip_prefix("sha256:").unwrap_or(image_id);
    (!id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| state_dir.join("images").join(format!("{id}.json")))
}

/// Where the roots read from an image are kept (`runtime::roots`), beside its probe's
/// findings: `<state>/images/<id>.roots.pem`.
pub(crate) fn image_roots_cache_path(state_dir: &Path, image_id: &str) -> Option<PathBuf> {
    image_probe_path(state_dir, image_id).map(|p| p.with_extension("roots.pem"))
}

/// A member's private folder under the state folder.
pub fn member_ctl_dir(state_dir: &Path, team: &str, member: &str) -> PathBuf {
    team_run_dir(state_dir, team)
        .join("members")
        .join(member)
        .join("ctl")
}

/// The start gate's release file in a member's control folder (inside: `/.ateam/go`, which
/// `gate/main.rs` reads): the container id and start it lets run (`runtime::gate`).
pub(crate) fn gate_release_path(ctl_dir: &Path) -> PathBuf {
    ctl_dir.join(GATE_RELEASE_NAME)
}

/// `gate_release_path`'s name in the control folder (the egress proxy reads it there).
pub(crate) const GATE_RELEASE_NAME: &str = "go";

/// The member's secrets (`name=value`, NUL-separated) in its control folder, which the gate
/// gives the member's command.
pub(crate) fn secrets_path(ctl_dir: &Path) -> PathBuf {
    ctl_dir.join("secrets")
}

/// The next task `ateam task` gave a member's container, in its control folder (inside:
/// `/.ateam/task`, which the gate reads).
pub(crate) fn task_path(ctl_dir: &Path) -> PathBuf {
    ctl_dir.join("task")
}

/// How often ateam restarted a member by its restart policy, in its control folder.
pub(crate) fn restarts_path(ctl_dir: &Path) -> PathBuf {
    ctl_dir.join("restarts")
}

/// The record of the containers ateam made for a member (`store::Record`), beside its control
/// folder and never mounted into it.
pub fn member_record_path(run_dir: &Path, member: &str) -> PathBuf {
    members_dir(run_dir).join(member).join("containers.json")
}

/// The person's answers to a member's pending approvals (`approvals::record`): ateam's
/// user's, 0600, beside the control folder and never mounted into the member.
pub(crate) fn member_approvals_path(state_dir: &Path, team: &str, member: &str) -> PathBuf {
    members_dir(&team_run_dir(state_dir, team))
        .join(member)
        .join("approvals.json")
}

/// A suspended member's record (`store::suspended`): since when, and where its HOME was
/// kept. Beside the control folder, never mounted into it: the member cannot undo it.
pub(crate) fn member_suspended_path(state_dir: &Path, team: &str, member: &str) -> PathBuf {
    members_dir(&team_run_dir(state_dir, team))
        .join(member)
        .join("suspended.json")
}

/// A resumed member's HOME, to be put back at its next start before its gate opens
/// (`runtime`); gone once it is. Beside the control folder, never mounted into it.
pub(crate) fn member_resume_path(state_dir: &Path, team: &str, member: &str) -> PathBuf {
    members_dir(&team_run_dir(state_dir, team))
        .join(member)
        .join("resume.json")
}

/// Where a suspended member's HOME is kept: an archive its own `tar` wrote, inside its own
/// transcript folder (the same path inside and out). ateam never opens it on the host: the
/// member's `tar` writes it and, at the next start, reads it back into HOME.
pub(crate) fn suspended_home_archive(transcript_dir: &Path) -> PathBuf {
    transcript_dir.join(SUSPENDED_HOME_NAME)
}

/// `suspended_home_archive`'s name in the transcript folder.
pub(crate) const SUSPENDED_HOME_NAME: &str = ".ateam-suspended-home.tar";

/// The hosts a member's helper requests asked for that its grant does not allow
/// (`approvals::asks`): ateam's user's, 0600, beside the answers, never mounted.
pub(crate) fn member_helper_asks_path(state_dir: &Path, team: &str, member: &str) -> PathBuf {
    members_dir(&team_run_dir(state_dir, team))
        .join(member)
        .join("helper-asks.json")
}

/// What a member's proxy lets through besides its policy for the member's present start
/// only (allow once): the member's uid's, 0600, read by the proxy by this name in its folder.
pub(crate) const EGRESS_ONCE_NAME: &str = "once.json";

/// A learning run's bounds (`ateam apply --learn`): until when, and within what, the proxy
/// lets through what the list does not name but the person could approve.
pub(crate) const EGRESS_LEARN_NAME: &str = "learn.json";

/// `EGRESS_ONCE_NAME` in the proxy's folder.
pub(crate) fn egress_dir_once_path(egress_dir: &Path) -> PathBuf {
    egress_dir.join(EGRESS_ONCE_NAME)
}

/// Where a team's sockets live: under the state folder, private to the user.
pub fn team_run_dir(state_dir: &Path, team: &str) -> PathBuf {
    teams_dir(state_dir).join(team)
}

/// Where a main session's tmux server listens.
pub fn session_socket_path(state_dir: &Path, team: &str, session: &str) -> PathBuf {
    session_socket_in(&session_dir(state_dir, team, session))
}

/// `session_socket_path`, from the session's folder (`session_dir`, or an entry of
/// `sessions_dir`).
pub(crate) fn session_socket_in(session_dir: &Path) -> PathBuf {
    session_dir.join("tmux.sock")
}

/// A main session's own files: its terminal's socket, when it started, a promotion's journal.
pub fn session_dir(state_dir: &Path, team: &str, session: &str) -> PathBuf {
    session_dir_in(&team_run_dir(state_dir, team), session)
}

/// `session_dir`, from the team's folder (`team_run_dir`).
pub(crate) fn session_dir_in(run_dir: &Path, session: &str) -> PathBuf {
    sessions_dir(run_dir).join(session)
}

/// The folder of a team's main sessions' own files (one folder per session, even of one
/// the manifests no longer name).
pub(crate) fn sessions_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("sessions")
}

/// Longest path a Unix socket can be bound at: `sun_path` holds 108 bytes, NUL included.
/// Validation checks every socket path against it, so that a long name or state folder is
/// refused up front rather than failing when tmux or the egress proxy tries to listen.
pub(crate) const MAX_SOCKET_PATH: usize = 107;

/// Where a member's egress proxy listens: in its control folder, which is mounted into that
/// member alone (at `/.ateam`), is 0700 and belongs to the user the member runs as. The folder
/// is mounted, not the socket file, so a restarted proxy's new socket is seen inside.
pub(crate) fn egress_socket_path(state_dir: &Path, team: &str, member: &str) -> PathBuf {
    member_ctl_dir(state_dir, team, member).join(EGRESS_SOCKET_NAME)
}

/// The socket's name in the control folder (inside a member: `/.ateam/egress.sock`).
pub(crate) const EGRESS_SOCKET_NAME: &str = "egress.sock";

/// A team's CA for intercepted egress (`servers::egress::tls`): its certificate and its key, 0600 and
/// the store owner's, in a 0700 folder no member mounts and no proxy reads.
pub(crate) fn team_ca_dir(state_dir: &Path, team: &str) -> PathBuf {
    team_run_dir(state_dir, team).join("egress-ca")
}

/// The team CA's certificate, in `team_ca_dir`.
pub(crate) const TEAM_CA_CERT_NAME: &str = "ca.pem";

/// The team CA's key, in `team_ca_dir`.
pub(crate) const TEAM_CA_KEY_NAME: &str = "ca.key";

/// In a member's control folder (inside: `/.ateam/`): its team's CA alone, for clients that
/// add a CA to their own roots (Node's `NODE_EXTRA_CA_CERTS`).
pub(crate) const CA_CERT_NAME: &str = "ca.pem";

/// In a member's control folder: the image's own roots followed by its team's CA, for clients
/// that take one bundle in place of the system's (`SSL_CERT_FILE`, `CURL_CA_BUNDLE`, ...).
pub(crate) const CA_BUNDLE_NAME: &str = "ca-bundle.pem";

/// A member's egress proxy's own files: its allowlist, pid file and log. Never mounted.
pub fn egress_dir(state_dir: &Path, team: &str, member: &str) -> PathBuf {
    egress_dir_in(&team_run_dir(state_dir, team), member)
}

/// `egress_dir`, from the team's folder (`team_run_dir`).
pub fn egress_dir_in(run_dir: &Path, member: &str) -> PathBuf {
    members_dir(run_dir).join(member).join("egress")
}

/// The allowlist the proxy reads (rewritten atomically by apply; the proxy re-reads it when
/// it changes, so a new list needs no new container).
pub(crate) fn egress_policy_path(egress_dir: &Path) -> PathBuf {
    egress_dir.join("policy.json")
}

/// The running proxy's pid.
pub(crate) fn egress_pid_path(egress_dir: &Path) -> PathBuf {
    egress_dir.join("proxy.pid")
}

/// Allowed and failed connections, JSON lines; rotated to `log.jsonl.1`. Refusals are
/// beside it, in `log-refused.jsonl` (`servers::egress::log::refused`), so that no noise rotates
/// them away.
pub fn egress_log_path(egress_dir: &Path) -> PathBuf {
    egress_dir.join("log.jsonl")
}

/// What the proxy said on standard error when it last started.
pub(crate) fn egress_err_path(egress_dir: &Path) -> PathBuf {
    egress_dir.join("proxy.err")
}

/// What an intercepting proxy holds besides its policy (`servers::egress::InterceptFile`): its
/// leaves and injected secrets, 0600 and the member's uid, read by the proxy by this name
/// in its folder.
pub(crate) const EGRESS_INTERCEPT_NAME: &str = "intercept.json";

/// `EGRESS_INTERCEPT_NAME` in the proxy's folder.
pub(crate) fn egress_intercept_path(egress_dir: &Path) -> PathBuf {
    egress_dir.join(EGRESS_INTERCEPT_NAME)
}

/// The image's own roots, as found in the member's container when it was made (the first
/// half of the member's `ca-bundle.pem`).
pub(crate) fn egress_image_roots_path(egress_dir: &Path) -> PathBuf {
    egress_dir.join("image-roots.pem")
}

/// The person's subscription logins (`crate::logins`): 0700, the store owner's, never
/// mounted into a member nor read by a proxy.
pub(crate) fn logins_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("logins")
}

/// One login, in `logins_dir`: `claude.json`, `codex.json`.
pub(crate) fn login_path(logins_dir: &Path, kind: &str) -> PathBuf {
    logins_dir.join(format!("{kind}.json"))
}

/// flock'ed by whoever reads, refreshes or replaces a login: one refresh at a time, so a
/// rotated refresh token is spent once.
pub(crate) fn logins_lock_path(logins_dir: &Path) -> PathBuf {
    logins_dir.join("lock")
}

/// flock'ed by the running login keeper for as long as it runs: one keeper per store.
pub(crate) fn keeper_lock_path(logins_dir: &Path) -> PathBuf {
    logins_dir.join("keeper.lock")
}

/// What the login keeper said on standard error when it last started.
pub(crate) fn keeper_err_path(logins_dir: &Path) -> PathBuf {
    logins_dir.join("keeper.err")
}

/// The lock that keeps two applies (or deletes) of one store from interleaving.
pub(crate) fn lock_path(state_dir: &Path) -> PathBuf {
    state_dir.join("lock")
}

/// Held by the one controller of a state folder while it runs.
pub(crate) fn controller_lock_path(state_dir: &Path) -> PathBuf {
    state_dir.join("controller.lock")
}

/// What the controller tells status: pid, since, last reconcile, errors.
pub(crate) fn controller_record_path(state_dir: &Path) -> PathBuf {
    state_dir.join("controller.json")
}

/// Where the start gate is written once, to be hard-linked into each member's control folder.
pub fn gate_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("gate")
}

/// What each engine said of itself, kept between runs (`backend::connect::Memo`).
pub(crate) fn engine_memo_path(state_dir: &Path) -> PathBuf {
    state_dir.join("engines.json")
}

/// Every team's folder; a team's name is the name of its folder here.
pub fn teams_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("teams")
}

/// The model of a team last applied.
pub(crate) fn applied_path(state_dir: &Path, team: &str) -> PathBuf {
    team_run_dir(state_dir, team).join("applied.json")
}

/// When the person deleted the team (its time is the file's): a controller that ran since
/// before leaves the team deleted until an apply removes this.
pub(crate) fn deleted_mark_path(state_dir: &Path, team: &str) -> PathBuf {
    team_run_dir(state_dir, team).join("deleted-at")
}

/// A team deleted without `--purge`: its last applied model, which says where the transcripts
/// that were kept are.
pub(crate) fn deleted_path(state_dir: &Path, team: &str) -> PathBuf {
    team_run_dir(state_dir, team).join("deleted.json")
}

/// What apply, the controller and the helper servers did to a team and why, JSON lines
/// (`crate::events`); rotated to `events.jsonl.1`.
pub fn team_events_path(state_dir: &Path, team: &str) -> PathBuf {
    team_run_dir(state_dir, team).join("events.jsonl")
}

/// The engine a team was applied on.
pub(crate) fn engine_path(state_dir: &Path, team: &str) -> PathBuf {
    team_run_dir(state_dir, team).join("engine.json")
}

/// The inspects of a team's running containers, kept between looks (see `observe::cache`).
pub(crate) fn inspect_cache_path(run_dir: &Path) -> PathBuf {
    run_dir.join("inspected.json")
}

/// The folder of a team's members' private files (one folder per member).
pub fn members_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("members")
}

/// Where a team's members' transcripts live: `<sessionDir>/members`, beside the main
/// sessions' transcripts at the top of the sessionDir.
pub(crate) fn transcripts_dir(session_dir: &Path) -> PathBuf {
    session_dir.join("members")
}

/// Where a team's writers' repositories live: `<sessionDir>/workspaces` (so no main session
/// may be called `workspaces`), each `<member>`, and ateam's shadow repositories beside them
/// in `.ateam` (a name no member can have).
pub(crate) fn workspaces_dir(session_dir: &Path) -> PathBuf {
    session_dir.join("workspaces")
}

/// Where a member's copy snapshots of its write grants are kept (`Member.snapshotWrites`):
/// `<sessionDir>/snapshots/<member>` (so no main session may be called `snapshots`).
pub(crate) fn copy_snapshots_dir(session_dir: &Path, member: &str) -> PathBuf {
    session_dir.join("snapshots").join(member)
}

/// A member's own repository: `<sessionDir>/workspaces/<member>`.
pub fn workspace_dir(session_dir: &Path, member: &str) -> PathBuf {
    workspaces_dir(session_dir).join(member)
}

/// ateam's shadow of a member's repository: its own config, index and snapshot refs, with
/// the member's objects as an alternate (`crate::workspace`).
pub fn workspace_shadow(session_dir: &Path, member: &str) -> PathBuf {
    workspaces_dir(session_dir)
        .join(".ateam")
        .join(format!("{member}.git"))
}

/// A main session's transcript folder: at the top of the sessionDir (so no main session may
/// be called `members`).
pub(crate) fn session_transcript_dir(session_dir: &Path, session: &str) -> PathBuf {
    session_dir.join(session)
}

/// A promotion's journal (`core::session::Promotion`), while one is under way.
pub fn promotion_path(session_dir: &Path) -> PathBuf {
    session_dir.join("promotion.json")
}

/// When ateam started a main session's terminal (seconds since the epoch), for `status`.
pub(crate) fn session_started_path(session_dir: &Path) -> PathBuf {
    session_dir.join("started")
}

/// What a session that takes over another finds in its transcript folder.
pub(crate) const RESUME_FILE: &str = "RESUME.md";

/// A member's transcript folder.
pub fn transcript_dir(session_dir: &Path, member: &str) -> PathBuf {
    transcripts_dir(session_dir).join(member)
}

/// The copies of a fork's write grants (`ateam fork`): `<sessionDir>/forks/<name>/<i>-…`, the
/// fork's, kept as its transcript is.
pub(crate) fn fork_dir(session_dir: &Path, name: &str) -> PathBuf {
    session_dir.join("forks").join(name)
}

/// Where the helper members a team's members asked for are recorded, one file each
/// (`<state>/teams/<team>/requested/<name>.json`, see `crate::requests`).
pub(crate) fn requested_dir(state_dir: &Path, team: &str) -> PathBuf {
    team_run_dir(state_dir, team).join("requested")
}

/// The record of one requested helper, in `requested_dir`.
pub(crate) fn requested_path(state_dir: &Path, team: &str, name: &str) -> PathBuf {
    requested_dir(state_dir, team).join(format!("{name}.json"))
}

/// The socket's name in the control folder (inside a member: `/.ateam/helpers.sock`).
pub(crate) const HELPERS_SOCKET_NAME: &str = "helpers.sock";

/// Where a member's helper server listens: in its control folder, as the egress socket, so
/// that it is mounted into that member alone and the server knows who asks.
pub(crate) fn helpers_socket_path(state_dir: &Path, team: &str, member: &str) -> PathBuf {
    member_ctl_dir(state_dir, team, member).join(HELPERS_SOCKET_NAME)
}

/// The team's tools' socket in the control folder (inside a member: `/.ateam/mcp.sock`).
pub(crate) const MCP_SOCKET_NAME: &str = "mcp.sock";

/// Where a member reaches the team's tools (MCP), served by its helper server.
pub(crate) fn mcp_socket_path(state_dir: &Path, team: &str, member: &str) -> PathBuf {
    member_ctl_dir(state_dir, team, member).join(MCP_SOCKET_NAME)
}

/// A member's helper server's own files (pid file, its standard error). Never mounted.
pub(crate) fn helpers_dir(state_dir: &Path, team: &str, member: &str) -> PathBuf {
    members_dir(&team_run_dir(state_dir, team))
        .join(member)
        .join("helpers")
}

/// A member's helper server's pid file, from the team's folder (`team_run_dir`).
pub(crate) fn helpers_pid_path(run_dir: &Path, member: &str) -> PathBuf {
    members_dir(run_dir)
        .join(member)
        .join("helpers")
        .join("server.pid")
}

/// What a member's helper server said on standard error when it last started, in its
/// folder (`helpers_dir`).
pub(crate) fn helpers_err_path(helpers_dir: &Path) -> PathBuf {
    helpers_dir.join("server.err")
}
