//! The detached processes ateam starts per member (egress proxies, helper servers): finding
//! one by its pid file, and stopping it, only it, surely.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::files;

/// The pid in `pid_file`, when that process lives and its arguments are `ours` (a pid reused
/// by another program since is never taken for ours).
pub fn running_pid(pid_file: &Path, ours: impl Fn(&[&[u8]]) -> bool) -> Option<u32> {
    // (Never through a link or from a FIFO: an egress folder belongs to the member's uid.)
    let pid: u32 = files::read_small(pid_file, 64)?.trim().parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    ours(&args).then_some(pid)
}

/// Whether process `pid` runs a binary that was deleted or replaced since it started (an
/// upgrade of ateam): the kernel then says `... (deleted)` for its `/proc/<pid>/exe`. False
/// when that cannot be read (another user's process, or gone): never a reason to act.
pub fn runs_a_replaced_binary(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.as_os_str().as_encoded_bytes().ends_with(b" (deleted)"))
        .unwrap_or(false)
}

/// `runs_a_replaced_binary` for the process of a pid file (never read through a link or from
/// a FIFO: an egress folder belongs to the member's uid).
pub fn pid_runs_a_replaced_binary(pid_file: &Path) -> bool {
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
pub const PROXY_ENV: &[&str] = &["RUST_LOG"];

/// What a helper server keeps: what finds the engine and judges grants as `apply` did (the
/// engine sockets, the user's folders, the sudo caller that decides a member's default user),
/// how to start a new member's proxy, and how much to log. Never a secret: requested helpers
/// have no `secretEnv`.
pub const SERVER_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "XDG_RUNTIME_DIR",
    "XDG_DATA_HOME",
    "XDG_CONFIG_HOME",
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "SUDO_UID",
    "SUDO_GID",
    "ATEAM_EGRESS_EXE",
    "RUST_LOG",
];

/// Gives `cmd` a cleared environment with only the variables of `keep` that this process has.
pub fn clear_env(cmd: &mut std::process::Command, keep: &[&str]) {
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
pub struct Backoff {
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
