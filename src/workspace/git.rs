//! Running git on what a member wrote. git runs code from a repository's config and hooks
//! (fsmonitor, hooksPath, filters, textconv, sshCommand, ...), so no command here reads a
//! member's config: each runs with `GIT_DIR` an ateam-owned repository (the member's shadow,
//! or the person's own), a cleared environment (no system or global config, no terminal
//! prompt, no replace refs), every setting that runs or redirects something pinned off on the
//! command line, as the uid whose files it reads, and with bounded time and output. No git
//! of ateam's can start another git: a child git (the `git status` that `git add` runs in a
//! nested repository) would read that repository's config, which is the member's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use crate::files::Owner;

/// Settings pinned on every command, over whatever config the repository has: nothing runs
/// (hooks, fsmonitor, external diff, pager, ssh, askpass, credential helpers, alternate refs
/// commands), no transport but local files, every object received is checked.
pub const PINNED: [&str; 22] = [
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.sshCommand=false",
    "core.askPass=false",
    "core.pager=cat",
    "core.alternateRefsCommand=",
    "core.quotePath=true",
    "core.autocrlf=false",
    "core.symlinks=true",
    "credential.helper=",
    "diff.external=",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "transfer.fsckObjects=true",
    "fetch.fsckObjects=true",
    "uploadpack.packObjectsHook=",
    "gc.auto=0",
    "maintenance.auto=false",
    "color.ui=false",
    "safe.directory=*",
    "advice.detachedHead=false",
];

/// Where git looks for the programs it starts (`PATH`, `GIT_EXEC_PATH`): below `/dev/null`,
/// where nothing can be.
const NO_PROGRAMS: &str = "/dev/null";

/// git, found once where ateam's own search would find it; every git builtin ateam runs is
/// in this one program.
fn git_binary() -> &'static std::path::Path {
    static GIT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    GIT.get_or_init(|| {
        ["/usr/local/bin", "/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join("git"))
            .find(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("/usr/bin/git"))
    })
}

/// What went wrong running git.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// git could not be started at all.
    #[error("cannot run git ({what}): {source}")]
    Spawn {
        /// The git command.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// It took longer than its bound (a FIFO, an endless pack): it was killed.
    #[error("git {what} took longer than {secs} s and was stopped")]
    Timeout {
        /// The git command.
        what: String,
        /// Its bound.
        secs: u64,
    },
    /// It waited to open a FIFO (planted where git reads a file): it was stopped.
    #[error(
        "git {what} was stopped: it waited to open a FIFO in the member's folder (one where git reads a file: a .gitignore, a .gitattributes, a nested repository's HEAD)"
    )]
    Fifo {
        /// The git command.
        what: String,
    },
    /// It printed more than its bound: it was stopped.
    #[error("git {what} printed more than {max} bytes and was stopped")]
    TooMuch {
        /// The git command.
        what: String,
        /// Its bound.
        max: usize,
    },
    /// It ran and failed.
    #[error("git {what} failed: {stderr}")]
    Failed {
        /// The git command.
        what: String,
        /// What it said, escaped.
        stderr: String,
    },
}

/// One git command: which repository, which work tree and index, as whom, within what.
#[derive(Debug, Clone)]
pub struct Git {
    git_dir: PathBuf,
    work_tree: Option<PathBuf>,
    index: Option<PathBuf>,
    user: Option<Owner>,
    timeout: Duration,
    max_output: usize,
}

/// What a command printed.
#[derive(Debug)]
pub struct Output {
    /// Standard output, as printed.
    pub stdout: Vec<u8>,
    /// Standard error, as printed (not escaped).
    pub stderr: String,
}

impl Output {
    /// Standard output as text, trimmed (git's own output of ids and names).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_string()
    }
}

impl Git {
    /// Commands on the repository whose git folder is `git_dir`.
    pub fn new(git_dir: &Path) -> Git {
        Git {
            git_dir: git_dir.to_path_buf(),
            work_tree: None,
            index: None,
            user: None,
            timeout: Duration::from_secs(120),
            max_output: 64 << 20,
        }
    }

    /// With `dir` as the work tree (the member's folder, read as files only).
    pub fn work_tree(mut self, dir: &Path) -> Git {
        self.work_tree = Some(dir.to_path_buf());
        self
    }

    /// With `file` as the index.
    pub fn index(mut self, file: &Path) -> Git {
        self.index = Some(file.to_path_buf());
        self
    }

    /// Run as `owner` (when ateam is root and it is another uid): a command reading a
    /// member's folder never reads more than the member could.
    pub fn user(mut self, owner: Owner) -> Git {
        self.user = Some(owner);
        self
    }

    /// At most `max` bytes of output.
    pub fn max_output(mut self, max: usize) -> Git {
        self.max_output = max;
        self
    }

    /// The command as it will run, with `args` after the pinned settings.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(git_binary());
        c.env_clear()
            // A folder that cannot exist: git finds no git (nor anything else) to start.
            .env("PATH", NO_PROGRAMS)
            .env("GIT_EXEC_PATH", NO_PROGRAMS)
            .env("HOME", "/nonexistent")
            .env("LC_ALL", "C")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_ALLOW_PROTOCOL", "file")
            .env("GIT_CEILING_DIRECTORIES", "/")
            .env("GIT_AUTHOR_NAME", "ateam")
            .env("GIT_AUTHOR_EMAIL", "ateam@localhost")
            .env("GIT_COMMITTER_NAME", "ateam")
            .env("GIT_COMMITTER_EMAIL", "ateam@localhost")
            .env("GIT_DIR", &self.git_dir);
        if let Some(w) = &self.work_tree {
            c.env("GIT_WORK_TREE", w).current_dir(w);
        } else {
            c.current_dir("/");
        }
        if let Some(i) = &self.index {
            c.env("GIT_INDEX_FILE", i);
        }
        if let Some(u) = self.user
            && rustix::process::geteuid().is_root()
            && u.uid != 0
        {
            c.uid(u.uid).gid(u.gid);
        }
        for p in PINNED {
            c.arg("-c").arg(p);
        }
        c.args(args).kill_on_drop(true);
        c
    }

    /// Runs `args`; its output if it succeeded.
    pub async fn run(&self, args: &[&str]) -> Result<Output, GitError> {
        self.run_with(args, None).await
    }

    /// Runs `args` with `input` on its standard input.
    pub async fn run_with(&self, args: &[&str], input: Option<&[u8]>) -> Result<Output, GitError> {
        let what = args.first().copied().unwrap_or("").to_string();
        let (ok, out) = self.try_run(args, input).await?;
        if ok {
            Ok(out)
        } else {
            Err(GitError::Failed {
                what,
                stderr: crate::core::untrusted::shown(out.stderr.trim()).into_owned(),
            })
        }
    }

    /// Runs `args`; whether it exited 0, and what it printed (for commands whose exit code
    /// is an answer, such as `merge-base --is-ancestor`).
    pub async fn try_run(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
    ) -> Result<(bool, Output), GitError> {
        let what = args.first().copied().unwrap_or("").to_string();
        let mut c = self.command(args);
        c.stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = c.spawn().map_err(|source| GitError::Spawn {
            what: what.clone(),
            source,
        })?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let max = self.max_output;
        let work = async {
            let feed = async {
                if let (Some(mut s), Some(bytes)) = (stdin, input) {
                    use tokio::io::AsyncWriteExt;
                    // A command that stops reading early is not an error here: its exit is.
                    let _ = s.write_all(bytes).await;
                }
            };
            // Standard error on its own task: a command stopped for its output must not wait
            // for it.
            let err = tokio::spawn(capped(stderr, 64 << 10));
            let (_, out) = tokio::join!(feed, capped(stdout, max));
            if out.is_none() {
                let _ = child.start_kill();
            }
            let status = child.wait().await;
            (out, err.await.ok().flatten(), status)
        };
        let secs = self.timeout.as_secs();
        let watched = async {
            tokio::select! {
                done = work => Ok(done),
                () = waits_on_fifo(pid) => Err(GitError::Fifo { what: what.clone() }),
            }
        };
        // Stopped (or timed out), the child is killed when dropped (`kill_on_drop`).
        let (out, err, status) =
            tokio::time::timeout(self.timeout, watched)
                .await
                .map_err(|_| GitError::Timeout {
                    what: what.clone(),
                    secs,
                })??;
        let out = out.ok_or(GitError::TooMuch {
            what: what.clone(),
            max,
        })?;
        let status = status.map_err(|source| GitError::Spawn {
            what: what.clone(),
            source,
        })?;
        let stderr = String::from_utf8_lossy(&err.unwrap_or_default()).into_owned();
        Ok((
            status.success(),
            Output {
                stdout: out,
                stderr,
            },
        ))
    }
}

/// Returns once a thread of process `pid` sleeps opening a FIFO that no one writes to (the
/// kernel's `wait_for_partner`). A member can put a FIFO where git opens a file of its work
/// tree (a `.gitignore`, a `.gitattributes`, a nested repository's HEAD): git would wait
/// there until its bound; no git of ateam's has a reason to open a FIFO.
async fn waits_on_fifo(pid: Option<u32>) {
    let Some(pid) = pid else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        let waiting = tasks
            .flatten()
            .any(|t| std::fs::read(t.path().join("wchan")).is_ok_and(|w| w == b"wait_for_partner"));
        if waiting {
            return;
        }
    }
}

/// Everything `r` gives, or None past `max` bytes.
async fn capped(mut r: impl AsyncRead + Unpin, max: usize) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return Some(buf),
            Ok(n) => {
                if buf.len() + n > max {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}
