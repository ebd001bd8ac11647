//! Exit codes, all in one place: what a command found (`Exit::verdict`) and what went wrong
//! (`classify`, from the library's typed errors). `docs/exit-codes.md` is the same table for
//! people; a test keeps the two in step.
//!
//! 0 and 1 are a verdict (as `diff`, `grep`, `kubectl diff`): the machine matches the
//! manifests, or it does not. 2 and above are errors; each class has its own code so that CI
//! can tell "fix the manifests" from "the engine is down, try again".

use std::process::ExitCode;

use ateam::app::AppError;
use ateam::backend::BackendError;
use ateam::controller::daemon::ControllerError;
use ateam::manifest::ManifestError;
use ateam::store::StoreError;
use ateam::store::controller::StatusError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done; in sync; no changes; valid.
    Ok,
    /// 1: the machine differs from the manifests: drift (`status --exit-code`), changes to
    /// make (`diff`, `apply --dry-run`), or what an apply or delete could not put right.
    Differs,
    /// 2: any other error, usage errors included (clap's own are 2 too).
    Error,
    /// 3: the manifests are invalid or unreadable; nothing was changed.
    Invalid,
    /// 4: apply refused before its first change: a secret, an image, a command or a limit
    /// that a member needs is missing; nothing was changed.
    Refused,
    /// 5: the container engine cannot be reached, or failed a request.
    Engine,
    /// 6: the state folder cannot be read or written, was written by a newer ateam, or another
    /// command holds it (`--no-wait`, a second controller).
    State,
    /// `exec`: the exit code of the member's command, passed on.
    Command(u8),
}

impl Exit {
    /// Every code a command of ateam's own ends with, for the table test.
    pub const ALL: [Exit; 7] = [
        Exit::Ok,
        Exit::Differs,
        Exit::Error,
        Exit::Invalid,
        Exit::Refused,
        Exit::Engine,
        Exit::State,
    ];

    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Differs => 1,
            Exit::Error => 2,
            Exit::Invalid => 3,
            Exit::Refused => 4,
            Exit::Engine => 5,
            Exit::State => 6,
            Exit::Command(c) => c,
        }
    }

    /// 0 when the machine matches the manifests, 1 when it differs.
    pub fn verdict(differs: bool) -> Exit {
        if differs { Exit::Differs } else { Exit::Ok }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// The exit code of an error: the first typed error in its chain decides (the outermost
/// context is anyhow's, the library's typed error is below it).
pub fn classify(e: &anyhow::Error) -> Exit {
    for cause in e.chain() {
        if let Some(e) = cause.downcast_ref::<AppError>() {
            return app(e);
        }
        if cause.downcast_ref::<ManifestError>().is_some() {
            return Exit::Invalid;
        }
        if cause.downcast_ref::<StoreError>().is_some()
            || cause.downcast_ref::<StatusError>().is_some()
        {
            return Exit::State;
        }
        if cause.downcast_ref::<BackendError>().is_some() {
            return Exit::Engine;
        }
        if let Some(e) = cause.downcast_ref::<ControllerError>() {
            return match e {
                ControllerError::Lock(_) => Exit::State,
                ControllerError::App(e) => app(e),
                ControllerError::Watch(_) => Exit::Error,
                ControllerError::Metrics(_) => Exit::Error,
                ControllerError::Invalid(_) => Exit::Invalid,
                // `#[non_exhaustive]` across the crate boundary.
                _ => Exit::Error,
            };
        }
    }
    Exit::Error
}

/// The error as a person reads it: its chain joined with ": ", a cause left out when the
/// error above it says it already (the library's errors name their path and show their
/// source, so `{:#}` would say "PATH: No space left: PATH: No space left: No space left").
pub fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut above = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !above.is_empty() && above.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        above = text;
    }
    out
}

fn app(e: &AppError) -> Exit {
    match e {
        AppError::Manifest(_) => Exit::Invalid,
        AppError::Store(_) => Exit::State,
        AppError::Backend(_) | AppError::RecordedEngine { .. } => Exit::Engine,
        // The command line asks for what cannot be: usage errors.
        AppError::MixedBackends | AppError::NotApplied { .. } => Exit::Error,
        AppError::Io { .. } => Exit::Error,
        AppError::NoMainSession { .. } => Exit::Refused,
        _ => Exit::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/exit-codes.md has one row per code, in order, and no other.
    #[test]
    fn the_documented_table_is_this_one() {
        let doc = include_str!("../../docs/exit-codes.md");
        let rows: Vec<u8> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("| "))
            .filter_map(|l| l.split(' ').next()?.parse().ok())
            .collect();
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(rows, codes, "docs/exit-codes.md");
    }

    /// A full state folder: said once, with the file it could not write.
    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let full = std::io::Error::from_raw_os_error(28);
        let e = anyhow::Error::new(AppError::Store(StoreError::Io {
            path: "/s/teams/t/applied.json".into(),
            source: full,
        }));
        assert_eq!(
            message(&e),
            "the state folder: /s/teams/t/applied.json: No space left on device (os error 28)"
        );
        let e = anyhow::anyhow!("disk").context("writing the record");
        assert_eq!(message(&e), "writing the record: disk");
    }

    #[test]
    fn typed_errors_below_context_decide() {
        let invalid =
            anyhow::Error::new(AppError::Manifest(ManifestError::Empty(vec![]))).context("reading");
        assert_eq!(classify(&invalid), Exit::Invalid);
        let engine = anyhow::Error::new(BackendError::NotFound { id: "x".into() });
        assert_eq!(classify(&engine), Exit::Engine);
        let store = anyhow::Error::new(AppError::Store(StoreError::Busy {
            holder: "pid 1".into(),
        }));
        assert_eq!(classify(&store), Exit::State);
        assert_eq!(
            classify(&anyhow::anyhow!("say what to delete")),
            Exit::Error
        );
    }
}
