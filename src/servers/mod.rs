//! The processes ateam runs per member, beside its container: detached from the command that
//! started them, each on a socket in the member's control folder that only that member can
//! reach, so that whoever connects is that member and is judged as it.
//!
//! - `egress`: the member's egress proxy (`ateam egress-proxy`): its allowlist, the
//!   interception of hosts with rules, its log; and starting, refreshing and stopping it;
//! - `helper`: the member's helper server (`ateam helper-server`): starting and stopping it
//!   as execute carries out the plan, and, in `helper::server`, the server itself, which
//!   judges the member's helper requests and brings the helpers up as apply does.
//!
//! One home by job, not one layer: the proxy and the helper server's lifecycle sit low in
//! `lib.rs`'s map (execute and observe use them), while `helper::server` converges with
//! `app::apply` and is measured as part of `app` (`scripts/structure.py`).

pub mod egress;
pub mod helper;
