//! The detached processes ateam starts per member (egress proxies, helper servers):
//! launching one (`Launch`: the same steps for both), finding one by its pid file, and
//! stopping it, only it, surely.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::files;

/// How long a started daemon has to answer on its socket.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(5);

/// The `ateam` binary that runs the detached processes: this one, unless a debug build is
/// told another (`test_hooks::egress_exe`: a program that links the library is not `ateam`).
pub fn exe() -> std::io::Result<PathBuf> {
    match crate::test_hooks::egress_exe() {
        Some(p) => Ok(p),
        None => std::env::current_exe(),
    }
}

/// Whether something answers on a daemon's socket: its liveness.
pub fn answers(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}

/// One per-member process to start, detached from ateam: the same steps for an egress
/// proxy, its `--detach` launcher and a helper server, so that none of them gets more of
/// ateam's environment than `keep` (apply's holds every `secretEnv` value), or a terminal,
/// and what each says on standard error is kept where the error that follows reads it.
#[derive(Debug)]
pub(crate) struct Launch<'a> {
    /// Finds the program (`exe`, or `std::env::current_exe` for a launcher already running
    /// the right binary).
    pub program: fn() -> std::io::Result<PathBuf>,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// The variables of ateam's environment it keeps (`PROXY_ENV`, `SERVER_ENV`).
    pub keep: &'a [&'a str],
    /// Where its standard error goes, made afresh at each start (0600, never through a
    /// link); none: nowhere (a launcher whose daemon keeps its own).
    pub stderr: Option<&'a Path>,
}

/// How a started process leaves ateam's hands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detach {
    /// It is a launcher that starts the daemon as its own child and exits at once: waited
    /// for here, and its failure is the start's.
    Launcher,
    /// It is the daemon itself: reaped by a thread, since it lives on after the caller is
    /// done with it.
    Reaped,
}

/// Which step of a launch failed. Each daemon words it as its own error (`ProxyError`,
/// `servers::helper::StartError`), so what a person reads is the daemon's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// Its standard error's file could not be made.
    #[error("{}: {source}", .path.display())]
    Stderr {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The program could not be found (`Launch::program`).
    #[error("ateam: {0}")]
    Program(#[source] std::io::Error),
    /// The program could not be run (or, a launcher, waited for).
    #[error("cannot run {}: {source}", .exe.display())]
    Spawn {
        /// The program.
        exe: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The launcher (`Detach::Launcher`) failed.
    #[error("its launcher exited with {0}")]
    Launcher(ExitStatus),
    /// Nothing answered on the socket within `START_TIMEOUT`: what the daemon said on
    /// standard error, trimmed, if anything.
    #[error("nothing answered within {}s", START_TIMEOUT.as_secs())]
    NotAnswering {
        /// What the daemon said, if anything.
        why: Option<String>,
    },
}

impl Launch<'_> {
    /// Runs the program: its standard error's file first (so a failed start still leaves
    /// a fresh one), then the program, with no input or output and only `keep`.
    pub fn spawn(&self) -> Result<Child, LaunchError> {
        self.spawn_named().map(|(child, _)| child)
    }

    /// `spawn`, and the program it ran.
    fn spawn_named(&self) -> Result<(Child, PathBuf), LaunchError> {
        let stderr = match self.stderr {
            Some(path) => {
                Stdio::from(
                    files::create_log(path).map_err(|source| LaunchError::Stderr {
                        path: path.to_path_buf(),
                        source,
                    })?,
                )
            }
            None => Stdio::null(),
        };
        let exe = (self.program)().map_err(LaunchError::Program)?;
        let mut cmd = Command::new(&exe);
        clear_env(&mut cmd, self.keep);
        let spawned = cmd
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn();
        match spawned {
            Ok(child) => Ok((child, exe)),
            Err(source) => Err(LaunchError::Spawn { exe, source }),
        }
    }

    /// Starts the daemon and waits until something answers on `socket` (every 10 ms, for
    /// `START_TIMEOUT`). When nothing does, the error carries what it said in `said` (read
    /// without following a link).
    pub fn start(&self, detach: Detach, socket: &Path, said: &Path) -> Result<(), LaunchError> {
        let (mut child, exe) = self.spawn_named()?;
        match detach {
            Detach::Launcher => {
                let status = child
                    .wait()
                    .map_err(|source| LaunchError::Spawn { exe, source })?;
                if !status.success() {
                    return Err(LaunchError::Launcher(status));
                }
            }
            Detach::Reaped => {
                std::thread::spawn(move || child.wait());
            }
        }
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if answers(socket) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut why = String::new();
        if let Ok(mut f) = files::open_regular(said) {
            let _ = f.read_to_string(&mut why);
        }
        Err(LaunchError::NotAnswering {
            why: (!why.trim().is_empty()).then(|| why.trim().to_string()),
        })
    }
}

/// The pid in `pid_file`, when that process lives and its arguments are `ours` (a pid reused
/// by another program since is never taken for ours).
pub(crate) fn running_pid(pid_file: &Path, ours: impl Fn(&[&[u8]]) -> bool) -> Option<u32> {
    // (Never through a link or from a FIFO: an egress folder belongs to the member's uid.)
    let pid: u32 = files::read_small(pid_file, 64)?.trim().parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    ours(&args).then_some(pid)
}

/// Whether process `pid` runs a binary that was deleted or replaced since it started (an
/// upgrade of ateam): the kernel then says `... (deleted)` for its `/proc/<pid>/exe`. False
/// when that cannot be read (another user's process, or gone): never a reason to act.
pub(crate) fn runs_a_replaced_binary(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.as_os_str().as_encoded_bytes().ends_with(b" (deleted)"))
        .unwrap_or(false)
}

/// `runs_a_replaced_binary` for the process of a pid file (never read through a link or from
/// a FIFO: an egress folder belongs to the member's uid).
pub(crate) fn pid_runs_a_replaced_binary(pid_file: &Path) -> bool {
    files::read_small(pid_file, 64)
        .and_then(|s| s.trim().parse::<u32>().ok())
        .is_some_and(runs_a_replaced_binary)
}

/// Stops the process `running` finds (TERM, then KILL after 2 s), then removes its socket and
/// pid file.
pub fn stop(
    running: impl Fn() -> Option<u32>,
    socket: &Path,
    pid_file: &Path,
) -> std::io::Result<()> {
    if let Some(pid) = running()
        && let Some(p) = rustix::process::Pid::from_raw(pid as i32)
    {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(2);
        while running() == Some(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if running() == Some(pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
    files::remove_if_present(socket)?;
    files::remove_if_present(pid_file)
}

/// What an egress proxy keeps of its starter's environment: nothing but how much to log. It
/// needs no other variable, and `apply`'s environment holds every `secretEnv` value.
pub(crate) const PROXY_ENV: &[&str] = &["RUST_LOG"];

/// What a helper server keeps: what finds the engine and judges grants as `apply` did (the
/// engine sockets, the user's folders, the sudo caller that decides a member's default user),
/// how to start a new member's proxy, and how much to log. Never a secret: requested helpers
/// have no `secretEnv`.
pub(crate) const SERVER_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "XDG_RUNTIME_DIR",
    "XDG_DATA_HOME",
    "XDG_CONFIG_HOME",
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "SUDO_UID",
    "SUDO_GID",
    // `test_hooks::egress_exe` (debug builds): the proxies a helper server starts run the
    // same binary as apply's.
    "ATEAM_EGRESS_EXE",
    "RUST_LOG",
];

/// Gives `cmd` a cleared environment with only the variables of `keep` that this process has.
pub(crate) fn clear_env(cmd: &mut std::process::Command, keep: &[&str]) {
    cmd.env_clear();
    for k in keep {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
}

/// The nice value of the detached processes: under contention the host's own work goes first.
const NICENESS: i32 = 10;

/// Bounds the calling process, which a member drives, before it serves: its descriptor limit
/// raised to the hard limit (a connection bound, not EMFILE, refuses the member), its
/// priority lowered, and its data (heap, stacks) capped at `max_data` bytes, so that a
/// runaway ends this process (ateam starts it again) rather than the host's memory. Returns
/// the descriptor limit now in force. Best effort: a limit that cannot be set is reported
/// and the process serves under what it has.
pub fn limit_self(max_data: u64) -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let files = getrlimit(Resource::Nofile);
    if files.current != files.maximum {
        let raised = Rlimit {
            current: files.maximum,
            maximum: files.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(error = %e, "cannot raise the descriptor limit");
        }
    }
    let data = getrlimit(Resource::Data);
    if data.maximum.is_none_or(|m| m > max_data) {
        let capped = Rlimit {
            current: Some(max_data),
            maximum: Some(max_data),
        };
        if let Err(e) = setrlimit(Resource::Data, capped) {
            tracing::warn!(error = %e, "cannot cap the data size");
        }
    }
    if let Err(e) = rustix::process::setpriority_process(None, NICENESS) {
        tracing::warn!(error = %e, "cannot lower the priority");
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Paces an accept loop that ran out of descriptors or memory (EMFILE, ENFILE, ENOBUFS,
/// ENOMEM): the pending connection stays readable, so retrying at once spins a core. The
/// pause grows from 10 ms to 1 s and starts again after an accept that worked.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    next: Option<Duration>,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    /// How long to pause after `e`; none for an error of the one connection (it is gone).
    pub fn after(&mut self, e: &std::io::Error) -> Option<Duration> {
        use rustix::io::Errno;
        let code = e.raw_os_error().map(Errno::from_raw_os_error)?;
        if ![Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM].contains(&code) {
            return None;
        }
        let now = self.next.unwrap_or(Self::FIRST);
        self.next = Some((now * 2).min(Self::MAX));
        Some(now)
    }

    /// An accept worked: the next pause starts small again.
    pub fn reset(&mut self) {
        self.next = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_whose_binary_was_replaced_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("sleeper");
        std::fs::copy("/bin/sleep", &bin).unwrap();
        let mut child = std::process::Command::new(&bin).arg("30").spawn().unwrap();
        assert!(!runs_a_replaced_binary(child.id()));
        assert!(!runs_a_replaced_binary(std::process::id()));
        // An upgrade: a new file takes the old one's name; the process keeps the old one.
        std::fs::copy("/bin/sleep", dir.path().join("next")).unwrap();
        std::fs::rename(dir.path().join("next"), &bin).unwrap();
        assert!(runs_a_replaced_binary(child.id()));
        let pid_file = dir.path().join("pid");
        std::fs::write(&pid_file, child.id().to_string()).unwrap();
        assert!(pid_runs_a_replaced_binary(&pid_file));
        assert!(!pid_runs_a_replaced_binary(&dir.path().join("none")));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn running_out_of_descriptors_pauses_longer_each_time_and_other_errors_not_at_all() {
        let mut b = Backoff::default();
        let emfile = std::io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error());
        let got: Vec<u128> = (0..9)
            .map(|_| b.after(&emfile).unwrap().as_millis())
            .collect();
        assert_eq!(got, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        let aborted =
            std::io::Error::from_raw_os_error(rustix::io::Errno::CONNABORTED.raw_os_error());
        assert_eq!(b.after(&aborted), None);
        assert_eq!(b.after(&std::io::ErrorKind::Other.into()), None);
        b.reset();
        assert_eq!(b.after(&emfile), Some(Duration::from_millis(10)));
    }

    fn sh<'a>(script: &str, stderr: Option<&'a Path>) -> Launch<'a> {
        Launch {
            program: || Ok("/bin/sh".into()),
            args: vec!["-c".into(), script.into()],
            keep: &["PATH"],
            stderr,
        }
    }

    #[test]
    fn a_launch_keeps_what_it_says_and_only_the_variables_it_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let err = dir.path().join("daemon.err");
        let mut child = sh("echo said; env", Some(&err)).spawn().unwrap();
        child.wait().unwrap();
        let said = std::fs::read_to_string(&err).unwrap();
        assert!(said.is_empty(), "stdout goes nowhere: {said}");
        let mut child = sh("echo said >&2; env >&2", Some(&err)).spawn().unwrap();
        child.wait().unwrap();
        let said = std::fs::read_to_string(&err).unwrap();
        let mut lines = said.lines();
        assert_eq!(lines.next(), Some("said"));
        // `sh` adds PWD, SHLVL and `_` of its own; nothing else comes from here.
        let names: Vec<&str> = lines.filter_map(|l| l.split('=').next()).collect();
        assert!(
            names
                .iter()
                .all(|n| ["PATH", "PWD", "SHLVL", "_", "OLDPWD"].contains(n)),
            "{names:?}"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&err).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Each start's file is its own.
        sh("echo again >&2", Some(&err))
            .spawn()
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(std::fs::read_to_string(&err).unwrap(), "again\n");
    }

    #[test]
    fn a_start_waits_for_its_socket_and_says_why_it_failed() {
        let dir = tempfile::tempdir().unwrap();
        let (socket, err) = (dir.path().join("d.sock"), dir.path().join("d.err"));
        // A launcher that fails is the start's failure.
        let e = sh("exit 3", None).start(Detach::Launcher, &socket, &err);
        assert!(
            matches!(e, Err(LaunchError::Launcher(s)) if s.code() == Some(3)),
            "{e:?}"
        );
        // Something answers: started.
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        sh("true", Some(&err))
            .start(Detach::Reaped, &socket, &err)
            .unwrap();
        drop(listener);
        std::fs::remove_file(&socket).unwrap();
        // Nothing answers: what the daemon said is the reason.
        let started = Instant::now();
        let e = sh("echo cannot bind >&2", Some(&err)).start(Detach::Reaped, &socket, &err);
        assert!(started.elapsed() >= START_TIMEOUT);
        match e {
            Err(LaunchError::NotAnswering { why }) => {
                assert_eq!(why.as_deref(), Some("cannot bind"))
            }
            other => panic!("{other:?}"),
        }
        let missing = Launch {
            program: || Err(std::io::ErrorKind::NotFound.into()),
            ..sh("true", None)
        };
        assert!(matches!(missing.spawn(), Err(LaunchError::Program(_))));
    }

    #[test]
    fn a_detached_process_gets_only_the_variables_it_keeps() {
        let mut cmd = std::process::Command::new("env");
        cmd.env("ATEAM_TEST_SECRET_VALUE", "s3cret");
        clear_env(&mut cmd, &["PATH", "ATEAM_TEST_NOT_SET_ANYWHERE"]);
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("s3cret"), "{text}");
        let names: Vec<&str> = text.lines().filter_map(|l| l.split('=').next()).collect();
        assert!(names.iter().all(|n| *n == "PATH"), "{names:?}");
    }
}
