//! Facts about the machine that validation and planning depend on, read once and passed in as a
//! value so that the rules themselves stay testable with any host.
//!
//! `engines` finds where container engines keep their data and sockets; `mounts` reads the
//! mount table, which shows what a folder really is when a bind mount gives it another name.

pub(crate) mod access;
pub(crate) mod engines;
pub(crate) mod mounts;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::model::UserId;
pub use engines::EngineDir;

/// Engine folders, found on first use: only validation needs them, and finding them reads
/// the command line of every process on the machine (a status or a no-op apply would pay for
/// hundreds of reads it never uses).
#[derive(Debug, Clone, Default)]
pub struct EngineDirs {
    env: Option<Arc<engines::UserEnv>>,
    found: Arc<OnceLock<Vec<EngineDir>>>,
}

impl EngineDirs {
    /// Those of this machine, as `env` describes it, when first asked for.
    pub fn detect(env: engines::UserEnv) -> EngineDirs {
        EngineDirs {
            env: Some(Arc::new(env)),
            found: Arc::default(),
        }
    }

    /// Starts finding the folders on a thread of their own, if they are not found yet: the
    /// scan of every process (13 ms at 200 members) then runs while the manifests are
    /// parsed, and `get` waits only for what is left of it.
    pub(crate) fn prefetch(&self) {
        if self.found.get().is_some() || self.env.is_none() {
            return;
        }
        let me = self.clone();
        std::thread::spawn(move || {
            me.get();
        });
    }

    /// The folders, found now if not yet.
    pub fn get(&self) -> &[EngineDir] {
        self.found.get_or_init(|| {
            let dirs = self.env.as_deref().map(engines::detect).unwrap_or_default();
            tracing::debug!(engine_dirs = dirs.len(), "engine folders found");
            dirs
        })
    }
}

impl PartialEq for EngineDirs {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for EngineDirs {}

/// The machine ateam runs on, as validation and planning see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The uid ateam runs as.
    pub uid: u32,
    /// The gid ateam runs as.
    pub gid: u32,
    /// The user's home folder: default sessionDirs lie below it, and no grant may hold it.
    pub home: PathBuf,
    /// Total memory in bytes.
    pub memory_bytes: u64,
    /// ateam's own state folder; no grant may overlap it.
    pub state_dir: PathBuf,
    /// Container engines' data roots and socket folders found on this machine (beyond
    /// `engines::defaults()`, which hold everywhere); no grant may reach them.
    pub engine_dirs: EngineDirs,
    /// The user who ran `sudo ateam` (SUDO_UID, SUDO_GID), when ateam runs as root for them.
    pub sudo_user: Option<UserId>,
}

impl Host {
    /// Who members run as when neither the Member nor its Team says `user`: the caller; when
    /// the caller is root, the user who ran sudo; else `nobody`. Never root by default: a
    /// member running as root owns every root-owned file in its grants.
    pub(crate) fn default_member_user(&self) -> UserId {
        let caller = UserId {
            uid: self.uid,
            gid: self.gid,
        };
        if !caller.is_root() {
            return caller;
        }
        self.sudo_user
            .filter(|u| !u.is_root())
            .unwrap_or(UserId::NOBODY)
    }
}

impl Host {
    /// Where ateam keeps the agents' native builds it brings into members
    /// (`runtime::agents`): `~/.cache/ateam/agents`, the caller's own. No member may write it
    /// (`manifest::reach::Fence`): what is there runs in every member with an agent.
    pub fn agents_dir(&self) -> PathBuf {
        self.home.join(".cache/ateam/agents")
    }

    /// The uids of the person applying, whose listeners on the host a member's
    /// `host.ateam.internal:PORT` may reach: ateam's own uid; when that is root, also the
    /// user it runs for by default (who ran sudo, or else the owner of the team's
    /// `folder`), since a root apply is that person's. Never `nobody`: it is everyone's.
    pub(crate) fn appliers(&self, folder: Option<&Path>) -> Vec<u32> {
        let mut out = vec![self.uid];
        if self.uid != 0 {
            return out;
        }
        let person = self
            .sudo_user
            .filter(|u| !u.is_root())
            .or_else(|| folder.and_then(|f| self.folder_owner_user(f)));
        if let Some(u) = person.filter(|u| u.uid != UserId::NOBODY.uid) {
            out.push(u.uid);
        }
        out
    }
}

impl Host {
    /// Who members of a team whose manifest lies in `folder` run as, when neither the Member
    /// nor the Team says `user` and the caller is root with no sudo user: the folder's owner
    /// (the person whose checkout it is), unless that is root. `None`: the default holds.
    pub(crate) fn folder_owner_user(&self, folder: &Path) -> Option<UserId> {
        use std::os::unix::fs::MetadataExt;
        let caller = UserId {
            uid: self.uid,
            gid: self.gid,
        };
        if !caller.is_root() || self.sudo_user.is_some_and(|u| !u.is_root()) {
            return None;
        }
        let meta = std::fs::metadata(folder).ok()?;
        let owner = UserId {
            uid: meta.uid(),
            gid: meta.gid(),
        };
        (!owner.is_root()).then_some(owner)
    }

    /// Read the real machine. `state_dir` overrides `$XDG_STATE_HOME/ateam`.
    pub fn detect(state_dir: Option<PathBuf>) -> Host {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/".into());
        let state_dir = state_dir.unwrap_or_else(|| default_state_dir(&home));
        let env = engines::UserEnv::from_vars(std::env::vars_os().map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        }));
        let host = Host {
            engine_dirs: EngineDirs::detect(engines::UserEnv {
                home: home.clone(),
                ..env
            }),
            uid: current_id("-u"),
            gid: current_id("-g"),
            memory_bytes: memory_total().unwrap_or(u64::MAX),
            home,
            state_dir,
            sudo_user: sudo_user(),
        };
        tracing::debug!(
            uid = host.uid,
            gid = host.gid,
            home = %host.home.display(),
            state_dir = %host.state_dir.display(),
            memory_bytes = host.memory_bytes,
            sudo_uid = host.sudo_user.map(|u| u.uid),
            "host detected"
        );
        host
    }
}

fn sudo_user() -> Option<UserId> {
    let id = |k: &str| std::env::var(k).ok()?.parse().ok();
    Some(UserId {
        uid: id("SUDO_UID")?,
        gid: id("SUDO_GID")?,
    })
}

/// `$XDG_STATE_HOME/ateam`, or `~/.local/state/ateam`.
pub(crate) fn default_state_dir(home: &Path) -> PathBuf {
    match std::env::var_os("XDG_STATE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x).join("ateam"),
        _ => home.join(".local/state/ateam"),
    }
}

/// The process's real uid or gid, taken from /proc to avoid an unsafe libc call.
fn current_id(flag: &str) -> u32 {
    let field = if flag == "-u" { "Uid:" } else { "Gid:" };
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn memory_total() -> Option<u64> {
    meminfo("MemTotal:")
}

/// Memory the kernel could give to new work now (`MemAvailable`), in bytes.
pub(crate) fn memory_available() -> Option<u64> {
    meminfo("MemAvailable:")
}

fn meminfo(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Where `bin` is on `PATH`, if it is.
pub fn which(bin: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(uid: u32, sudo_user: Option<UserId>) -> Host {
        Host {
            uid,
            gid: uid,
            home: "/root".into(),
            memory_bytes: 1 << 30,
            state_dir: "/var/lib/ateam".into(),
            engine_dirs: EngineDirs::default(),
            sudo_user,
        }
    }

    #[test]
    fn a_root_callers_members_run_as_the_owner_of_the_teams_folder() {
        let d = tempfile::tempdir().unwrap();
        let person = UserId {
            uid: 4242,
            gid: 4343,
        };
        if rustix::process::getuid().is_root() {
            std::os::unix::fs::chown(d.path(), Some(person.uid), Some(person.gid)).unwrap();
            assert_eq!(host(0, None).folder_owner_user(d.path()), Some(person));
            // A folder of root's: the default (nobody) holds.
            assert_eq!(host(0, None).folder_owner_user(Path::new("/")), None);
        }
        // sudo says who the person is; a caller who is not root runs its members itself.
        let sudo = Some(UserId { uid: 1, gid: 1 });
        assert_eq!(host(0, sudo).folder_owner_user(d.path()), None);
        assert_eq!(host(1000, None).folder_owner_user(d.path()), None);
    }

    #[test]
    fn the_person_who_applies_is_the_caller_and_for_root_whom_it_runs_for() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(host(1000, None).appliers(Some(d.path())), [1000]);
        let sudo = Some(UserId {
            uid: 1001,
            gid: 1001,
        });
        assert_eq!(host(0, sudo).appliers(None), [0, 1001]);
        // `sudo -u root`, or no sudo and a folder of root's: root alone, never nobody.
        let root = Some(UserId { uid: 0, gid: 0 });
        assert_eq!(host(0, root).appliers(Some(Path::new("/"))), [0]);
        assert_eq!(host(0, Some(UserId::NOBODY)).appliers(None), [0]);
        if rustix::process::getuid().is_root() {
            std::os::unix::fs::chown(d.path(), Some(4242), Some(4242)).unwrap();
            assert_eq!(host(0, None).appliers(Some(d.path())), [0, 4242]);
        }
    }
}
