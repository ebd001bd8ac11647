//! Deaths the controller sees before the engine tells. Podman's `died` event comes from the
//! cleanup process conmon starts once the container exited (a new `podman` process, which
//! then cleans up): 100 ms and more after the death, where conmon's own `--restart always`
//! is already starting the container again. A pidfd of the container's first process is
//! readable the moment that process exits; the team is looked at then.
//!
//! A hint, never the truth, so it needs no proof beyond the look that named the pid: a wake
//! for a process that was not the member's (its pid reused between that look and the open)
//! costs one look; a death it misses (no pidfds on this kernel, a pid not in our namespace)
//! is still told by the engine's event and by the resync. The look it triggers asks the
//! engine, which tells the exit once it knows it (Podman's inspect reads conmon's exit file;
//! a list may still say `running` for a few milliseconds, and then the event's look follows).

use std::collections::BTreeMap;
use std::sync::Mutex;

use rustix::process::{Pid, PidfdFlags, pidfd_open};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::task::AbortHandle;
use tracing::debug;

/// The pids watched, by team then container id.
#[derive(Debug, Default)]
pub struct Exits {
    watched: Mutex<BTreeMap<String, BTreeMap<String, Watched>>>,
}

#[derive(Debug)]
struct Watched {
    pid: u32,
    task: AbortHandle,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Exits {
    /// Watches the first process of each of `team`'s `running` containers (id, host pid,
    /// member), and no other of that team's; `wake` runs with the member's name when one
    /// exits. A container already watched under the same pid keeps its watch.
    pub fn watch<F>(&self, team: &str, running: Vec<(String, u32, String)>, wake: F)
    where
        F: Fn(&str) + Clone + Send + 'static,
    {
        let mut all = self
            .watched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mine = all.entry(team.to_string()).or_default();
        let mut next = BTreeMap::new();
        for (id, pid, member) in running {
            let kept = mine.remove(&id).filter(|w| w.pid == pid);
            let w = kept.unwrap_or_else(|| {
                let wake = wake.clone();
                let task = tokio::spawn(async move {
                    if exited(pid).await {
                        wake(&member);
                    }
                });
                Watched {
                    pid,
                    task: task.abort_handle(),
                }
            });
            next.insert(id, w);
        }
        // What is left was not running at this look: dropping aborts its watch.
        *mine = next;
    }

    /// Stops watching `team`'s containers (the team is gone).
    pub fn forget(&self, team: &str) {
        self.watched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(team);
    }

    /// How many pids are watched.
    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.watched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .map(BTreeMap::len)
            .sum()
    }
}

/// Waits until `pid` exits: true then (or when it was already gone), false when it cannot be
/// watched here.
#[allow(
    deprecated,
    reason = "`with_interest`'s replacement is unsafe; here the AsyncFd owns the pidfd, so \
              nothing closes it while it is registered"
)]
async fn exited(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    let fd = match pidfd_open(p, PidfdFlags::NONBLOCK) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return true,
        Err(e) => {
            debug!(pid, error = %e, "no pidfd: the engine's events alone tell this exit");
            return false;
        }
    };
    match AsyncFd::with_interest(fd, Interest::READABLE) {
        Ok(afd) => afd.readable().await.is_ok(),
        Err(e) => {
            debug!(pid, error = %e, "a pidfd that cannot be polled");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    type Woken = Arc<std::sync::Mutex<Vec<String>>>;

    fn woken(w: &Woken) -> Vec<String> {
        w.lock().unwrap().clone()
    }

    async fn wait_for(w: &Woken, want: usize) {
        for _ in 0..500 {
            if woken(w).len() >= want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("woken {:?}, wanted {want} wakes", woken(w));
    }

    #[tokio::test]
    async fn an_exit_wakes_its_member_once_and_a_rewatch_keeps_the_watch() {
        let exits = Exits::default();
        let w: Woken = Arc::default();
        let wake = {
            let w = w.clone();
            move |member: &str| w.lock().unwrap().push(member.to_string())
        };
        let mut a = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut b = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let running = vec![
            ("a".to_string(), a.id(), "ma".to_string()),
            ("b".to_string(), b.id(), "mb".to_string()),
        ];
        exits.watch("t", running.clone(), wake.clone());
        exits.watch("t", running, wake.clone());
        assert_eq!(exits.count(), 2);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(woken(&w).is_empty(), "nothing exited yet");

        a.kill().unwrap();
        a.wait().unwrap();
        wait_for(&w, 1).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(woken(&w), ["ma"], "one exit, one wake, for its member");

        // No longer running at the next look: its watch ends, and its exit wakes nobody.
        exits.watch("t", vec![], wake);
        assert_eq!(exits.count(), 0);
        b.kill().unwrap();
        b.wait().unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(woken(&w), ["ma"]);
    }

    #[tokio::test]
    async fn a_pid_already_gone_wakes_at_once() {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        assert!(exited(pid).await);
    }
}
