//! A terminal of the test's own (a tmux server on its own socket), where commands run as a
//! person types them; `screen` is what the person sees.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::text;

pub struct Terminal {
    socket: PathBuf,
}

impl Terminal {
    /// `command` in a new terminal of `cols` x `rows`, its socket in `dir`; the pane stays
    /// when the command ends (so what it left on the screen can be read).
    pub fn new(dir: &Path, cols: u16, rows: u16, command: &str) -> Terminal {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = Terminal {
            socket: dir.join(format!("term{n}.sock")),
        };
        let ok = Command::new("tmux")
            .arg("-S")
            .arg(&t.socket)
            .args([
                "new-session",
                "-d",
                "-x",
                &cols.to_string(),
                "-y",
                &rows.to_string(),
            ])
            .args(["-s", "term"])
            .arg(command)
            .env_remove("TMUX")
            .status()
            .unwrap();
        assert!(ok.success());
        t.tmux(&["set-option", "-t", "term", "remain-on-exit", "on"]);
        t
    }

    pub fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        text(&out.stdout)
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "term"];
        args.extend(keys);
        self.tmux(&args);
    }

    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "term"])
    }

    /// The screen once it shows `what` (20 s at most).
    pub fn wait_for(&self, what: &str) -> String {
        self.wait_until(what, |s| s.contains(what))
    }

    /// The screen once `ok` holds for it (20 s at most); `what` names it in the failure.
    pub fn wait_until(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "never saw {what} on:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}
