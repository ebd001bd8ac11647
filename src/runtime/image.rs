//! Before an apply changes anything: is each member's image on the engine, and is its
//! command an executable file in it? (`Executor::preflight` asks, for every member the plan
//! creates; a refusal leaves the machine as it was.)
//!
//! The engines cannot stat a file in an image, only in a container. So each image gets one
//! probe: a container that is created and never started (no network, a command that does not
//! exist), looked at through the archive API (`HEAD /containers/{id}/archive`, the same on
//! Docker and on Podman rootful and rootless, without copying the file) and removed. That
//! costs one create and one remove per image, not per member; nothing of an image is pulled
//! or unpacked. A command below one of the member's mounts is looked for on the host instead
//! (that folder hides the image's there), and one below a tmpfs (`/tmp`, HOME) is never
//! there at start.
//!
//! What a probe finds is kept by the image's id (`<state>/images/<id>.json`): an id names
//! the image's content, which never changes, so the next apply, controller reconcile or
//! helper request that creates a member of the same image and command needs no probe (on
//! Podman a probe is about half of bringing one member up). The probe is made from the id,
//! not the name, so that a tag moved meanwhile cannot put another image's findings there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::backend::{Backend, BackendError, ImageConfig, PROBE_LABEL, PathStat};
use crate::core::container::Mount;
use crate::files::{self, Owner};
use crate::plan::spec::DesiredMember;

/// The PATH a container gets when neither the image nor the member sets one (Docker's and
/// Podman's default).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Symlinks followed at most, as the kernel's limit for a path lookup.
const MAX_LINKS: usize = 40;

/// Where a member's command would be looked for, in order, as execvp does.
pub fn candidates(program: &str, cwd: &Path, path_var: &str) -> Vec<PathBuf> {
    if program.starts_with('/') {
        vec![program.into()]
    } else if program.contains('/') {
        vec![cwd.join(program)]
    } else {
        path_var
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| Path::new(d).join(program))
            .collect()
    }
}

/// The PATH a member's command is looked up in: the member's own, else the image's.
pub fn path_var(m: &DesiredMember, image: &ImageConfig) -> String {
    m.spec
        .env
        .get("PATH")
        .cloned()
        .or_else(|| {
            image
                .env
                .iter()
                .find_map(|e| e.strip_prefix("PATH=").map(str::to_string))
        })
        .unwrap_or_else(|| DEFAULT_PATH.to_string())
}

/// Where a candidate path lies for the member's container.
#[derive(Debug, PartialEq, Eq)]
pub enum Place {
    /// In the image's own files.
    Image,
    /// In a folder mounted from the host: this host path.
    Host(PathBuf),
    /// Below a tmpfs: empty when the member starts.
    Tmpfs,
}

/// Which file system `path` is on, in a container with these bind mounts and tmpfs mounts
/// (a member's `spec.mounts` and `spec.tmpfs`): the deepest mount that holds it.
pub fn place(mounts: &[Mount], tmpfs: &BTreeMap<String, String>, path: &Path) -> Place {
    let mut best: Option<(usize, Place)> = None;
    let mut consider = |target: &Path, place: Place| {
        let depth = target.components().count();
        if best.as_ref().is_none_or(|(d, _)| depth > *d) {
            best = Some((depth, place));
        }
    };
    for mount in mounts {
        if let Ok(rest) = path.strip_prefix(&mount.target) {
            consider(&mount.target, Place::Host(mount.source.join(rest)));
        }
    }
    for target in tmpfs.keys().map(Path::new) {
        if path.starts_with(target) {
            consider(target, Place::Tmpfs);
        }
    }
    best.map_or(Place::Image, |(_, p)| p)
}

/// A host file that a member could run: a regular file with an execute bit.
fn host_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// One image's probe container, made at the first look (a member whose command lies in a
/// mounted folder needs none), with what was already looked up in it.
pub struct Probe<'a> {
    backend: &'a dyn Backend,
    image: String,
    store: String,
    id: Option<String>,
    seen: BTreeMap<PathBuf, bool>,
    /// Where the findings for this image's id are kept, and whose the file is; none when the
    /// engine gave no id.
    kept: Option<(PathBuf, Owner)>,
    /// Found something the kept file does not have yet.
    fresh: bool,
}

impl<'a> Probe<'a> {
    /// A probe of `config`'s image; with `state` (the state folder and its owner), findings
    /// are read from and kept in the image id's file.
    pub fn new(
        backend: &'a dyn Backend,
        image: &str,
        config: &ImageConfig,
        store: &str,
        state: Option<(&Path, Owner)>,
    ) -> Probe<'a> {
        let kept = state.and_then(|(dir, owner)| {
            Some((
                crate::core::layout::image_probe_path(dir, &config.id)?,
                owner,
            ))
        });
        let seen = kept
            .as_ref()
            .and_then(|(p, _)| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Probe {
            backend,
            // The id, when known: the very image the findings are kept for.
            image: if config.id.is_empty() {
                image.to_string()
            } else {
                config.id.clone()
            },
            store: store.to_string(),
            id: None,
            seen,
            kept,
            fresh: false,
        }
    }

    /// The probe container, made now if not yet (after removing any probe an interrupted
    /// apply of this store left behind).
    async fn id(&mut self) -> Result<String, BackendError> {
        if let Some(id) = &self.id {
            return Ok(id.clone());
        }
        let labels = BTreeMap::from([(PROBE_LABEL.to_string(), self.store.clone())]);
        for old in self.backend.list(&labels).await? {
            self.backend.remove(&old.id).await?;
        }
        let id = self.backend.create_probe(&self.image, &labels).await?;
        self.id = Some(id.clone());
        Ok(id)
    }

    /// Whether `path` is an executable file in the image, following symlinks (the engine
    /// resolves them in the container, and says where to).
    pub async fn executable(&mut self, path: &Path) -> Result<bool, BackendError> {
        if let Some(known) = self.seen.get(path) {
            return Ok(*known);
        }
        let id = self.id().await?;
        let mut at = path.to_path_buf();
        let mut found = false;
        for _ in 0..MAX_LINKS {
            let Some(st): Option<PathStat> = self.backend.stat(&id, &at.to_string_lossy()).await?
            else {
                break;
            };
            let target = Path::new(&st.link_target);
            if st.is_symlink() && !st.link_target.is_empty() && target != at {
                at = target.to_path_buf();
                continue;
            }
            found = st.is_executable_file();
            break;
        }
        self.seen.insert(path.to_path_buf(), found);
        self.fresh = true;
        Ok(found)
    }

    /// Keeps what was found (for the image's id) and removes the probe, if one was made.
    pub async fn remove(self) -> Result<(), BackendError> {
        if let Some((path, owner)) = &self.kept
            && self.fresh
        {
            let bytes = serde_json::to_vec(&self.seen).expect("findings always serialize");
            let kept = path
                .parent()
                .map_or(Ok(()), |d| files::private_dir(d, *owner))
                .and_then(|()| files::write_atomic(path, &bytes, 0o600, *owner));
            if let Err(e) = kept {
                tracing::warn!(path = %path.display(), error = %e, "cannot keep what the image probe found");
            }
        }
        match &self.id {
            Some(id) => self.backend.remove(id).await,
            None => Ok(()),
        }
    }
}

/// Whether the first of `candidates` that exists is an executable file, for `m`: in the
/// image (through `probe`), on the host (a mounted folder), or nowhere (a tmpfs).
pub async fn runnable(
    m: &DesiredMember,
    candidates: &[PathBuf],
    probe: &mut Probe<'_>,
) -> Result<bool, BackendError> {
    for c in candidates {
        let ok = match place(&m.spec.mounts, &m.spec.tmpfs, c) {
            Place::Image => probe.executable(c).await?,
            Place::Host(p) => host_executable(&p),
            Place::Tmpfs => false,
        };
        if ok {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What a member's command really runs, as far as ateam can tell without running it: the
/// programs to look for, outermost first (`env -u X prog` runs `env`, then `prog`), with the
/// PATH and working folder each is looked up in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// The program to look for: a path, or a name looked up in `path`.
    pub name: String,
    /// A PATH the command sets for it (`env PATH=... prog`), else the member's.
    pub path: Option<String>,
    /// A folder the command moves to first (`env -C DIR prog`), else the member's `cwd`.
    pub cwd: Option<PathBuf>,
}

/// The programs `command` runs, outermost first, and why ateam cannot tell what runs after
/// the last, when it cannot. Looked through: `env` (its options, `-u`, `-C`, `NAME=VALUE`),
/// `nice`, `timeout`, `nohup`, and `sh`/`bash`/`dash`/`ash` with `-c` whose script is one
/// simple command, or `exec` with one (after `NAME=VALUE` words). Anything else is run as it
/// is named: the first word is what the engine runs, and ateam checks no further.
pub fn programs(command: &[String]) -> (Vec<Program>, Option<String>) {
    let mut out = Vec::new();
    let mut words: Vec<String> = command.to_vec();
    let (mut path, mut cwd): (Option<String>, Option<PathBuf>) = (None, None);
    // Each round peels one wrapper; a command names at most a few.
    for _ in 0..8 {
        let Some(first) = words.first().cloned() else {
            break;
        };
        out.push(Program {
            name: first.clone(),
            path: path.clone(),
            cwd: cwd.clone(),
        });
        let base = first.rsplit('/').next().unwrap_or(&first).to_string();
        let rest = &words[1..];
        let next = match base.as_str() {
            "env" => peel_env(rest, &mut path, &mut cwd),
            "nice" => peel_nice(rest),
            "timeout" => peel_timeout(rest),
            "nohup" => Peeled::Next(rest.to_vec()),
            "sh" | "bash" | "dash" | "ash" => peel_shell(&base, rest),
            _ => Peeled::Done,
        };
        match next {
            Peeled::Done => return (out, None),
            Peeled::Next(w) if w.is_empty() => return (out, None),
            Peeled::Next(w) => words = w,
            Peeled::Unsure(why) => return (out, Some(why)),
        }
    }
    (out, None)
}

enum Peeled {
    /// The program runs nothing named in its arguments (or is not a wrapper).
    Done,
    /// It runs these words as a command.
    Next(Vec<String>),
    /// It runs something ateam cannot name: why.
    Unsure(String),
}

fn is_assignment(w: &str) -> bool {
    match w.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

fn peel_env(rest: &[String], path: &mut Option<String>, cwd: &mut Option<PathBuf>) -> Peeled {
    let mut i = 0;
    while i < rest.len() {
        let w = rest[i].as_str();
        match w {
            "--" => {
                i += 1;
                break;
            }
            "-i" | "-" | "--ignore-environment" | "-0" | "--null" | "-v" | "--debug" => {}
            "-u" | "--unset" => i += 1,
            "-C" | "--chdir" => {
                i += 1;
                *cwd = rest.get(i).map(PathBuf::from);
            }
            _ if w.starts_with("--unset=") || (w.starts_with("-u") && w.len() > 2) => {}
            _ if w.starts_with("--chdir=") => *cwd = Some(PathBuf::from(&w[8..])),
            _ if w.starts_with("-S") || w.starts_with("--split-string") => {
                return Peeled::Unsure(format!("`env {w}` splits a string into its command"));
            }
            _ if w.starts_with('-') && w.len() > 1 => {
                return Peeled::Unsure(format!("`env` option `{w}` is not one ateam knows"));
            }
            _ => break,
        }
        i += 1;
    }
    while i < rest.len() && is_assignment(&rest[i]) {
        if let Some(p) = rest[i].strip_prefix("PATH=") {
            *path = Some(p.to_string());
        }
        i += 1;
    }
    Peeled::Next(rest[i.min(rest.len())..].to_vec())
}

fn peel_nice(rest: &[String]) -> Peeled {
    let mut i = 0;
    while i < rest.len() {
        let w = rest[i].as_str();
        match w {
            "--" => {
                i += 1;
                break;
            }
            "-n" | "--adjustment" => i += 1,
            _ if w.starts_with("--adjustment=") => {}
            _ if w.starts_with('-') && w.len() > 1 => {}
            _ => break,
        }
        i += 1;
    }
    Peeled::Next(rest[i.min(rest.len())..].to_vec())
}

fn peel_timeout(rest: &[String]) -> Peeled {
    let mut i = 0;
    while i < rest.len() {
        let w = rest[i].as_str();
        match w {
            "--" => {
                i += 1;
                break;
            }
            "-s" | "--signal" | "-k" | "--kill-after" => i += 1,
            _ if w.starts_with('-') && w.len() > 1 => {}
            _ => break,
        }
        i += 1;
    }
    // Then the duration, then the command.
    Peeled::Next(
        rest.get(i + 1..)
            .map(<[String]>::to_vec)
            .unwrap_or_default(),
    )
}

/// `sh -c SCRIPT`: the script's program when it is one simple command (words without any
/// quoting, expansion or operator), or `exec` one, after `NAME=VALUE` words.
fn peel_shell(shell: &str, rest: &[String]) -> Peeled {
    let mut i = 0;
    let mut dash_c = false;
    while i < rest.len() {
        let w = rest[i].as_str();
        if w == "--" || !(w.starts_with('-') || w.starts_with('+')) || w.len() < 2 {
            break;
        }
        if w.starts_with('-') && !w.starts_with("--") && w.contains('c') {
            dash_c = true;
        }
        i += 1;
    }
    if !dash_c {
        // `sh script.sh`: the shell is what runs, and the script is data to it.
        return Peeled::Done;
    }
    let Some(script) = rest.get(i) else {
        return Peeled::Done;
    };
    let unsure = || {
        Peeled::Unsure(format!(
            "`{shell} -c` runs a script ateam does not read through (only one simple command, or `exec` one)"
        ))
    };
    if script.contains(|c: char| "\"'`$\\;&|<>(){}*?[]~#\n".contains(c)) {
        return unsure();
    }
    let mut words: Vec<&str> = script.split_whitespace().collect();
    while words.first().is_some_and(|w| is_assignment(w)) {
        words.remove(0);
    }
    if words.first() == Some(&"exec") {
        words.remove(0);
        if words.first().is_some_and(|w| w.starts_with('-')) {
            return unsure();
        }
    }
    // Built into the shell: nothing to look for. Keywords and builtins that run other words
    // (`eval`, `.`, `command`): not one simple command.
    const BUILTINS: &[&str] = &[
        ":", "true", "false", "echo", "printf", "exit", "return", "cd", "set", "export", "unset",
        "read", "test", "[", "wait", "trap", "sleep",
    ];
    const UNSURE: &[&str] = &[
        "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
        "function", "!", ".", "source", "eval", "command", "builtin", "exec",
    ];
    match words.first() {
        None => Peeled::Done,
        Some(w) if BUILTINS.contains(w) => Peeled::Done,
        Some(w) if UNSURE.contains(w) => unsure(),
        Some(_) => Peeled::Next(words.iter().map(|w| w.to_string()).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_looked_up_as_execvp_does() {
        let cwd = Path::new("/work");
        assert_eq!(candidates("/bin/sh", cwd, "/x"), [PathBuf::from("/bin/sh")]);
        assert_eq!(
            candidates("./run.sh", cwd, "/x"),
            [PathBuf::from("/work/./run.sh")]
        );
        assert_eq!(
            candidates("agent", cwd, "/usr/bin::/bin"),
            [PathBuf::from("/usr/bin/agent"), PathBuf::from("/bin/agent")]
        );
    }

    #[test]
    fn a_command_is_looked_for_where_the_container_would_find_it() {
        let mounts = [
            Mount::same(Path::new("/tmp/w/repo"), false),
            Mount {
                target: "/opt/tools".into(),
                source: "/home/u/tools".into(),
                read_only: true,
            },
        ];
        let tmpfs = BTreeMap::from([
            ("/tmp".to_string(), String::new()),
            ("/home/agent".to_string(), String::new()),
        ]);
        let at = |p: &str| place(&mounts, &tmpfs, Path::new(p));
        assert_eq!(at("/bin/sh"), Place::Image);
        assert_eq!(
            at("/opt/tools/run"),
            Place::Host("/home/u/tools/run".into())
        );
        // A grant below /tmp is the grant: the deepest mount wins.
        assert_eq!(
            at("/tmp/w/repo/run.sh"),
            Place::Host("/tmp/w/repo/run.sh".into())
        );
        assert_eq!(at("/tmp/w/other"), Place::Tmpfs);
        assert_eq!(at("/home/agent/bin/x"), Place::Tmpfs);
        assert_eq!(
            at("/optional"),
            Place::Image,
            "a prefix of a name is not a folder"
        );
    }

    fn names(command: &[&str]) -> (Vec<String>, Option<String>) {
        let command: Vec<String> = command.iter().map(|s| s.to_string()).collect();
        let (p, unsure) = programs(&command);
        (p.into_iter().map(|p| p.name).collect(), unsure)
    }

    #[test]
    fn the_program_that_really_runs_is_found_through_wrappers() {
        let sure = |c: &[&str], want: &[&str]| {
            assert_eq!(
                names(c),
                (want.iter().map(|s| s.to_string()).collect(), None),
                "{c:?}"
            )
        };
        sure(&["agent", "--x"], &["agent"]);
        sure(&["env", "-u", "X", "nosuchprog"], &["env", "nosuchprog"]);
        sure(
            &[
                "/usr/bin/env",
                "-i",
                "-uY",
                "--unset=Z",
                "A=1",
                "B=",
                "codex",
                "-q",
            ],
            &["/usr/bin/env", "codex"],
        );
        sure(&["env"], &["env"]);
        sure(&["env", "A=1"], &["env"]);
        sure(
            &["nice", "-n", "5", "timeout", "-s", "KILL", "10m", "claude"],
            &["nice", "timeout", "claude"],
        );
        sure(&["nohup", "agent"], &["nohup", "agent"]);
        sure(&["sh", "-c", "exec prog --flag x"], &["sh", "prog"]);
        sure(
            &["bash", "-ec", "A=1 B=2 exec /bin/agent.sh"],
            &["bash", "/bin/agent.sh"],
        );
        sure(&["sh", "-c", "prog arg"], &["sh", "prog"]);
        sure(
            &["sh", "-c", "exec env -u X nosuchprog"],
            &["sh", "env", "nosuchprog"],
        );
        sure(&["sh", "-c", "sleep 100000"], &["sh"]);
        sure(&["sh", "script.sh"], &["sh"]);
        sure(&["sh"], &["sh"]);
        // The demo's reviewer.
        sure(
            &[
                "sh",
                "-c",
                "ATEAM_NET_PROBE=http://127.0.0.1:8765/ exec /bin/agent.sh",
            ],
            &["sh", "/bin/agent.sh"],
        );
        let (found, unsure) = names(&["sh", "-c", "cd /x && exec prog"]);
        assert_eq!(found, ["sh"]);
        assert!(unsure.unwrap().contains("sh -c"));
        for c in [
            &["sh", "-c", "exec \"$AGENT\""][..],
            &["sh", "-c", "if true; then x; fi"],
            &["sh", "-c", "eval x"],
            &["env", "-S", "a b"],
            &["env", "--frobnicate", "x"],
        ] {
            assert!(names(c).1.is_some(), "{c:?} must say it cannot tell");
        }
        let cmd: Vec<String> = ["env", "-C", "/w", "PATH=/opt/bin", "tool"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let last = programs(&cmd).0.pop().unwrap();
        assert_eq!(last.path.as_deref(), Some("/opt/bin"));
        assert_eq!(last.cwd, Some(PathBuf::from("/w")));
    }

    #[test]
    fn go_file_modes_read_as_the_kernel_would() {
        let file = |mode| PathStat {
            mode,
            link_target: String::new(),
        };
        assert!(file(0o755).is_executable_file());
        assert!(!file(0o644).is_executable_file(), "no execute bit");
        assert!(!file((1 << 31) | 0o755).is_executable_file(), "a folder");
        assert!(file((1 << 27) | 0o777).is_symlink());
        assert!(!file((1 << 27) | 0o777).is_executable_file());
    }
}
