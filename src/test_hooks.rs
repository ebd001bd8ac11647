//! Switches that let a test reach a state it could not reach from outside: each is an
//! environment variable read by one function here, and only in debug builds (the ones
//! `cargo test` runs); in a release build each function is a constant and the variable is
//! never read, so no one can steer a released `ateam` with them.
//!
//! | Variable | What it does | Used by |
//! |---|---|---|
//! | `ATEAM_TEST_PROMOTION` | `crash-after:<step>` / `fail-after:<step>`: a session promotion ends the process, or fails, right after `<step>` is recorded (`sessions`) | `tests/e2e.rs` (interrupted and failed promotions), `tests/controller.rs` (a crash mid-promotion) |
//! | `ATEAM_EGRESS_EXE` | the `ateam` binary that runs the detached processes (egress proxies, helper servers, the login keeper), in place of the running one (`detached::exe`) | no test sets it today; a program that links the library (and so is not `ateam`) would. The helper server keeps it in its environment (`detached::SERVER_ENV`), which `tests/attacks_egress.rs` checks |

use std::path::PathBuf;

/// What `ATEAM_TEST_PROMOTION` asks of a promotion step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) enum PromotionFault {
    /// End the process as a kill would (`crash-after:<step>`).
    Crash,
    /// Make the promotion fail there (`fail-after:<step>`).
    Fail,
}

/// What `ATEAM_TEST_PROMOTION` asks of the promotion step `step` (by its recorded name), if
/// anything. Always `None` in a release build.
pub(crate) fn promotion_fault(step: &str) -> Option<PromotionFault> {
    #[cfg(debug_assertions)]
    {
        let v = std::env::var("ATEAM_TEST_PROMOTION").ok()?;
        if v == format!("crash-after:{step}") {
            return Some(PromotionFault::Crash);
        }
        if v == format!("fail-after:{step}") {
            return Some(PromotionFault::Fail);
        }
        None
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = step;
        None
    }
}

/// The binary `ATEAM_EGRESS_EXE` names to run the detached processes in place of this one, if
/// any. Always `None` in a release build.
pub(crate) fn egress_exe() -> Option<PathBuf> {
    #[cfg(debug_assertions)]
    {
        std::env::var_os("ATEAM_EGRESS_EXE").map(PathBuf::from)
    }
    #[cfg(not(debug_assertions))]
    {
        None
    }
}
