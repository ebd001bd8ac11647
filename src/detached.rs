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
