//! The one logging setup of every command: a `tracing` subscriber writing to stderr, as text or
//! JSON lines, filtered by `-v`/`-q` or by `RUST_LOG`.
//!
//! It lives in the binary, not the library: installing the process-wide subscriber is the
//! executable's decision (the library only emits events, so tests and other callers choose
//! their own), and it reads the clap types of `cli` and knows apply's progress display, both of
//! which are the binary's too.

use std::io::{self, Write};
use std::sync::Mutex;

use indicatif::MultiProgress;
use tracing::Level;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::ParseError;
use tracing_subscriber::fmt::MakeWriter;

use crate::cli::{LogArgs, LogFormat};

/// The default level of a command that runs and ends while a person watches (`apply`,
/// `status`, ...): warnings and errors only, since apply's progress display already shows its
/// steps. A long-running command (the future `ateam controller`) passes `Level::INFO`: nobody
/// watches it, so its log is the record of every action it took.
pub const COMMAND_DEFAULT: Level = Level::WARN;

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// `RUST_LOG` holds a directive that is not one (a usage error, like a bad flag).
    #[error("RUST_LOG={value:?} is not a valid filter: {source}")]
    RustLog {
        value: String,
        #[source]
        source: ParseError,
    },
    /// A subscriber was installed already (only a second call in one process does this).
    #[error("cannot set up logging: {0}")]
    Installed(Box<dyn std::error::Error + Send + Sync>),
}

/// Installs the subscriber for the whole process. `default` is the command's level when
/// neither `-v`/`-q` nor `RUST_LOG` says otherwise.
pub fn init(args: &LogArgs, default: Level) -> Result<(), LogError> {
    let filter = filter(args, default, std::env::var("RUST_LOG").ok().as_deref())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Stderr);
    match args.log_format {
        // Colors only for a person at a terminal (and not with NO_COLOR).
        LogFormat::Text => builder
            .with_ansi(
                io::IsTerminal::is_terminal(&io::stderr())
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
            )
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(LogError::Installed)
}

/// `RUST_LOG` when set (and not empty) replaces the flags entirely, as an `EnvFilter`;
/// else the directives of [`directives`].
fn filter(args: &LogArgs, default: Level, rust_log: Option<&str>) -> Result<EnvFilter, LogError> {
    match rust_log.filter(|v| !v.trim().is_empty()) {
        Some(value) => EnvFilter::builder()
            .parse(value)
            .map_err(|source| LogError::RustLog {
                value: value.to_string(),
                source,
            }),
        None => Ok(EnvFilter::new(directives(args, default))),
    }
}

/// The filter the flags ask for: `-q` is errors only, from every crate; else ateam's own events
/// at `default` raised one level per `-v`, and every other crate's (engine clients, HTTP) at
/// warn at most, so `-vvv` traces ateam without drowning it in hyper's trace.
fn directives(args: &LogArgs, default: Level) -> String {
    if args.quiet {
        return "error".into();
    }
    const LEVELS: [Level; 5] = [
        Level::ERROR,
        Level::WARN,
        Level::INFO,
        Level::DEBUG,
        Level::TRACE,
    ];
    let at = LEVELS.iter().position(|l| *l == default).unwrap_or(1);
    let ours = LEVELS[(at + usize::from(args.verbose)).min(LEVELS.len() - 1)];
    // In tracing's order a more verbose level is the greater one.
    let others = ours.min(Level::WARN);
    let name = |l: Level| l.as_str().to_ascii_lowercase();
    if ours == others {
        name(ours)
    } else {
        format!("{},ateam={}", name(others), name(ours))
    }
}

/// The progress display being drawn on stderr, if any: log lines are written around it.
static DISPLAY: Mutex<Option<MultiProgress>> = Mutex::new(None);

/// While `display` draws on stderr, each log line first clears it and then redraws it, so
/// neither garbles the other. `None` when the display is gone.
pub fn draw_around(display: Option<MultiProgress>) {
    *DISPLAY.lock().unwrap_or_else(|e| e.into_inner()) = display;
}

/// Where log lines go: stderr, one whole line per write (see [`Line`]).
struct Stderr;

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line(Vec::new())
    }
}

/// One formatted event, collected and written to stderr in one piece when dropped (the
/// formatter may write it in parts), around the progress display if one is drawn.
struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// While a full-screen display owns the terminal (`ateam top`), log lines are kept here (the
/// last one) instead of written over it; the display shows it on its message line.
static HELD: Mutex<Option<Option<String>>> = Mutex::new(None);

/// Holds log lines from now on (`true`), or writes them again (`false`).
pub fn hold(on: bool) {
    *HELD.lock().unwrap_or_else(|e| e.into_inner()) = on.then_some(None);
}

/// The last log line held since the last call, if any, without its colours.
pub fn take_held() -> Option<String> {
    let line = HELD
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .and_then(Option::take)?;
    // A colour is ESC '[' ... a letter.
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|c| c.is_ascii_alphabetic());
        } else if !c.is_control() {
            out.push(c);
        }
    }
    // A line may quote what a member chose (a name, a host): shown, never obeyed.
    Some(ateam::core::untrusted::shown(&out).into_owned())
}

impl Drop for Line {
    fn drop(&mut self) {
        if let Some(held) = HELD.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            let text = String::from_utf8_lossy(&self.0);
            *held = Some(text.trim_end().to_string());
            return;
        }
        // Nowhere to report a failed write of a log line to stderr.
        let write = || drop(io::stderr().lock().write_all(&self.0));
        let display = DISPLAY.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match display {
            Some(d) => d.suspend(write),
            None => write(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(verbose: u8, quiet: bool) -> LogArgs {
        LogArgs {
            verbose,
            quiet,
            log_format: LogFormat::Text,
        }
    }

    #[test]
    fn each_verbose_is_one_level_past_the_commands_default() {
        for (verbose, quiet, default, want) in [
            (0, false, Level::WARN, "warn"),
            (1, false, Level::WARN, "warn,ateam=info"),
            (2, false, Level::WARN, "warn,ateam=debug"),
            (3, false, Level::WARN, "warn,ateam=trace"),
            (9, false, Level::WARN, "warn,ateam=trace"),
            (0, true, Level::WARN, "error"),
            // A long-running command's default.
            (0, false, Level::INFO, "warn,ateam=info"),
            (1, false, Level::INFO, "warn,ateam=debug"),
            (0, true, Level::INFO, "error"),
        ] {
            assert_eq!(
                directives(&args(verbose, quiet), default),
                want,
                "-v x{verbose}, quiet {quiet}, default {default}"
            );
        }
    }

    #[test]
    fn rust_log_replaces_the_flags_and_a_bad_one_is_refused() {
        let quiet = args(0, true);
        let f = filter(&quiet, Level::WARN, Some("ateam=debug")).unwrap();
        assert_eq!(f.to_string(), "ateam=debug");
        // Empty is unset, as most tools read it.
        let f = filter(&quiet, Level::WARN, Some(" ")).unwrap();
        assert_eq!(f.to_string(), "error");
        let e = filter(&quiet, Level::WARN, Some("ateam=loud")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("RUST_LOG=\"ateam=loud\" is not a valid filter"),
            "{e}"
        );
    }
}
