//! ateam: a declarative controller for local containers that run teams of AI coding agents.
//!
//! The code follows the reconcile loop's data flow:
//! - `manifest`: read YAML files, check every rule, build the trusted `model::Desired`;
//! - `model`: what the manifests ask for, after validation;
//! - `host`: facts about this machine the rules need (uid, home, memory, state folder, the
//!   container engines' folders, the mount table);
//! - `plan`: the pure planning step, `plan(desired, observed) -> Plan`, and the container spec
//!   and spec hash it compares;
//! - `policy`: the container hardening as data: the create request, and the check of an
//!   engine's inspect result against it;
//! - `backend`: Docker (bollard) and Podman (podman-api) behind one trait, and engine discovery;
//! - `runtime`: the side effects of bringing a member up (pinning granted folders, the start
//!   gate in `gate/`, verification before the member's command runs);
//! - `controller`: the core of the long-running controller (not yet wired to the engine or
//!   the CLI): a keyed work queue, reconcile-error and crash-loop backoff, the driver loop;
//! - `cli` (clap types) and `commands` (one module per verb) live in the binary's edge.

pub mod backend;
pub mod controller;
pub mod execute;
pub mod host;
pub mod manifest;
pub mod model;
pub mod observe;
pub mod plan;
pub mod policy;
pub mod report;
pub mod runtime;
pub mod store;
