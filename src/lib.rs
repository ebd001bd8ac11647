//! ateam: a declarative controller for local containers that run teams of AI coding agents.
//!
//! Modules from the top down (each imports only those below it):
//! - `controller`: the long-running controller: a keyed work queue, reconcile-error and
//!   crash-loop backoff, the driver loop, the watches, the daemon `ateam controller` runs and
//!   its Prometheus metrics; it calls `app` as a command does;
//! - `app`: what a command or the controller asks for: read and judge manifests, find the
//!   engine, look and plan, apply (and wait), delete, and status as one call (`app::status`,
//!   which `status`, `status -w`, `top` and the metrics all read); and, of this layer though
//!   it lives in `servers`, `servers::helper::server`, the per-member helper server that judges
//!   a member's requests and converges as apply does;
//! - `observe` and `execute`: the reconcile loop's I/O: one look at the engine, the
//!   transcripts and the sockets; carrying out a plan with bounded concurrency;
//! - `sessions`: main sessions on the host (tmux), their resume files, and promotions
//!   (a member becoming a main session) step by step with their rollback;
//! - `runtime`: the side effects of bringing a member up (pinning granted folders, the start
//!   gate in `gate/`, verification before the member's command runs, limits in its cgroup,
//!   the agents' builds in the host's agent cache: fetched, checked, mounted read-only);
//! - `requests`: helper members a member asks for at run time, the pure part: judged as
//!   manifests, recorded, merged into what is desired (with the forks a person makes,
//!   `app::fork`, recorded beside them);
//! - `report`: diff and status as text and data;
//! - `approvals`: what a member was refused that the person could grant (pending
//!   approvals, with stable ids), and the person's answers kept in the state folder;
//! - `plan`: the pure planning step, `plan(desired, observed) -> Plan` (what is on the
//!   board wakes a member, so it reads the board's types);
//! - `board`: the team's board (tasks and messages its sessions hand each other): its rules,
//!   and its store in the state folder, whose changes are recorded as events;
//! - `events`: what apply, the controller and the helper servers did and why, per team,
//!   bounded in the state folder (it reads the egress proxies' refusals back as events);
//! - `servers`: the processes ateam runs per member, beside its container: `servers::egress`,
//!   a member's egress proxy (the detached `ateam egress-proxy` itself: allowlist,
//!   interception with the team's CA, its log; and starting, refreshing and stopping it), and
//!   `servers::helper`, starting and stopping the helper servers as execute carries out the
//!   plan (the server itself, `servers::helper::server`, is of `app`'s layer, above);
//! - `logins`: the person's subscription logins, ateam's alone: the store, its lock and the
//!   refresh (the keeper that refreshes them ahead of expiry is `app::login_keeper`);
//! - `manifest`: read YAML files, check every rule, build the trusted `model::Model`;
//! - `transcripts`: agents' own transcripts in a member's transcript folder, found and read
//!   within bounds, never through a link (what they say is `core::transcript`'s);
//! - `store`: the state folder's versioned records, the containers ateam made, the lock, the
//!   running controller's record (`store::controller`), which status reads, and the members
//!   a person suspended (`store::suspended`), which every look reads;
//! - `backend`: Docker (bollard) and Podman (podman-api) behind one trait, and discovery;
//!   `backend::docker` and `backend::podman` are folders of the same files for the same jobs;
//! - `policy`: the container hardening as data: the create request, and the check of an
//!   engine's inspect result against it;
//! - `host`: facts about this machine the rules need (uid, home, memory, state folder, the
//!   container engines' folders, the mount table);
//! - `workspace`: a writer's own repository beside the person's, its snapshots, and what
//!   ateam shows and collects of it, with git never running a member's config or hooks;
//! - `model`: what the manifests ask for, after validation (its egress rules are
//!   `core::intercept`'s types), and an agent's command and model host from it;
//! - `core`: the container types every layer shares, every path of the state folder
//!   (`core::layout`), and the environment variables ateam owns in a member (`core::env`);
//! - `detached`: launching, finding and stopping the per-member processes ateam detaches
//!   (egress proxies, helper servers); `files`: private folders and atomic writes.
//!
//! `cli` (clap types), `logging` (the tracing subscriber) and `commands` (one module per verb)
//! live in the binary's edge: the library emits `tracing` events and installs nothing.

#![cfg_attr(
    test,
    allow(
        clippy::wildcard_enum_match_arm,
        reason = "a test matches the variant it expects and fails on any other"
    )
)]

pub mod app;
pub mod approvals;
pub mod backend;
pub mod board;
pub(crate) mod build_context;
pub mod controller;
pub mod core;
pub mod detached;
pub mod events;
pub mod execute;
pub mod files;
pub mod host;
pub mod logins;
pub mod manifest;
pub mod model;
pub mod observe;
pub mod plan;
pub mod policy;
pub mod report;
pub mod requests;
pub mod runtime;
pub mod servers;
pub mod sessions;
pub mod store;
mod test_hooks;
pub mod transcripts;
pub mod workspace;
