//! The lowest layer: types and facts every other module shares, with no I/O and no
//! dependency on any other module of ateam.
//! - `agents`: what `agent:` on a Member expands to (Claude Code, Codex CLI);
//! - `container`: the container types (spec, names, labels, create request, what an engine
//!   reports);
//! - `egress`: what an egress allowlist entry means, and which addresses are never reached
//!   unless named exactly;
//! - `image_build`: a member image a repository defines (devcontainer.json, Dockerfile);
//! - `intercept`: allow entries with rules (the proxy terminates their TLS);
//! - `layout`: every path under ateam's state folder;
//! - `logins`: subscription logins: what a member holds instead, when ateam refreshes;
//! - `quantity`: memory and CPU quantities as manifests write them, and bytes as messages
//!   show them;
//! - `session`: a promotion's recorded steps;
//! - `transcript`: what an agent's own transcript says (tasks, tool calls, errors) and the
//!   outcome of its latest task;
//! - `untrusted`: text a member chose, made safe to show a person.

pub mod agents;
pub mod container;
pub mod egress;
pub(crate) mod env;
pub(crate) mod image_build;
pub mod intercept;
pub mod layout;
pub mod logins;
pub mod quantity;
pub mod selector;
pub(crate) mod session;
pub mod transcript;
pub mod untrusted;
