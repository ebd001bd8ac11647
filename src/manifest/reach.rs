//! Whether a granted folder reaches a folder no member may see (a team's transcripts, ateam's
//! state, an engine's data or socket), judged by what the kernel says rather than by spelling.
//!
//! A path check alone misses another name of the same folder: `mount --bind /a/sessions
//! /b/alias` makes `/b/alias` the transcripts folder, and `/b` a folder that holds it. So a
//! grant reaches a forbidden folder when, in this order:
//! 1. by name, one lies in the other (this also covers folders that do not exist yet);
//! 2. by device and inode, the grant is the folder or one of its existing ancestors (it is, or
//!    contains, the folder under another name), or the folder is one of the grant's ancestors;
//! 3. by the mount table, the mount the grant lies in, or a mount below the grant (bind mounts
//!    are recursive), shows a folder of the same file system that lies in or around the
//!    forbidden one (a bind mount of a folder inside it, which 2 cannot see).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::host::EngineDir;
use crate::host::mounts::{FsPath, Mounts};
use crate::model::Team;

/// A folder no grant may reach, and how to say so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Forbidden {
    /// The folder, absolute.
    pub path: PathBuf,
    /// What it is: `the transcripts folder of team `a``.
    pub what: String,
    /// Why no member may reach it.
    pub why: &'static str,
}

/// How a grant reaches a forbidden folder. `alias`: only under another name (the same device
/// and inode), not by the names as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// The grant is the folder.
    Is {
        /// Only under another name.
        alias: bool,
    },
    /// The folder is inside the grant.
    Contains {
        /// Only under another name.
        alias: bool,
    },
    /// The grant is inside the folder.
    Inside {
        /// Only under another name.
        alias: bool,
    },
    /// The mount at this place (the grant's own, or one below it) shows the folder, a folder
    /// in it, or one around it.
    Mount(PathBuf),
}

/// How `grant` reaches `folder`, if it does. Neither needs to exist; what does not exist is
/// judged by name and by the mount it would be made in.
pub fn reach(grant: &Path, folder: &Path, mounts: &Mounts) -> Option<Reach> {
    if grant == folder {
        return Some(Reach::Is { alias: false });
    }
    if folder.starts_with(grant) {
        return Some(Reach::Contains { alias: false });
    }
    if grant.starts_with(folder) {
        return Some(Reach::Inside { alias: false });
    }
    if let Some(g) = identity(grant) {
        for a in folder.ancestors() {
            if identity(a) == Some(g) {
                return Some(if a == folder {
                    Reach::Is { alias: true }
                } else {
                    Reach::Contains { alias: true }
                });
            }
        }
    }
    if let Some(f) = identity(folder)
        && grant.ancestors().skip(1).any(|a| identity(a) == Some(f))
    {
        return Some(Reach::Inside { alias: true });
    }
    let (folder_mount, f) = mounts.locate(folder)?;
    let (grant_mount, g) = mounts.locate(grant)?;
    if g.overlaps(&f) {
        // Two mounts of one file system (else the names would have matched): name the one
        // that is not the root, where the other name comes from.
        let at = if grant_mount.point == Path::new("/") {
            folder_mount
        } else {
            grant_mount
        };
        return Some(Reach::Mount(at.point.clone()));
    }
    mounts
        .below(grant)
        .find(|m| {
            f.overlaps(&FsPath {
                dev: m.dev.clone(),
                path: m.root.clone(),
            })
        })
        .map(|m| Reach::Mount(m.point.clone()))
}

/// `path` with its existing part resolved (symlinks followed) and the rest as written: the name
/// the kernel uses, so that names compare (`/var/run/x` is `/run/x`).
pub fn real_path(path: &Path) -> PathBuf {
    for a in path.ancestors() {
        if let Ok(real) = std::fs::canonicalize(a) {
            return match path.strip_prefix(a) {
                Ok(rest) if !rest.as_os_str().is_empty() => real.join(rest),
                _ => real,
            };
        }
    }
    path.to_path_buf()
}

const TRANSCRIPTS: &str = "members must not see each other's transcripts";
const ENGINES: &str =
    "a member that reaches a container engine's data or socket controls the engine";
const MANIFESTS: &str = "what a member writes there would be read as your intent by apply and the controller (a MainSession it writes runs on the host as you)";
const AGENTS: &str = "every member with `agent:` runs what is there";

/// What grants and transcripts folders are judged against beyond the manifests themselves:
/// the machine (engines' folders, ateam's state folder, the mount table) and every team in the
/// store. Built once per validation.
pub(crate) struct Fence<'a> {
    /// The mount table, or why it could not be read (then no grant passes: the check would be
    /// blind to bind mounts).
    mounts: Result<std::sync::Arc<Mounts>, String>,
    /// Engines' data roots and socket folders.
    engines: Vec<Forbidden>,
    /// ateam's state folder.
    state: Forbidden,
    /// Transcripts folders: of the teams being validated (once they pass their own rules),
    /// and of every team in the store, also those being applied again (their former folder
    /// still holds their transcripts).
    sessions: Vec<Forbidden>,
    /// The teams in the store that these manifests do not define again: they stay as they are.
    others: Vec<&'a Team>,
    /// What apply and the controller read: the `-f` paths of this run and those every team in
    /// the store was applied from. No member may write there.
    manifests: Vec<Forbidden>,
    /// The host's agent cache (`Host::agents_dir`): no member may write there.
    agents: Forbidden,
}

impl<'a> Fence<'a> {
    /// `applied`: the store's teams; `redefined`: names of the teams being validated; `given`:
    /// the `-f` paths the manifests were read from.
    pub fn new(
        state_dir: &Path,
        agents_dir: &Path,
        engine_dirs: &[EngineDir],
        applied: &'a [Team],
        redefined: &[&str],
        given: &[PathBuf],
    ) -> Fence<'a> {
        let mut fence = Fence {
            mounts: Mounts::current().map_err(|e| e.to_string()),
            engines: Vec::new(),
            state: Forbidden {
                path: real_path(state_dir),
                what: "ateam's own state folder".into(),
                why: "it holds members' secrets and start gates",
            },
            sessions: Vec::new(),
            others: applied
                .iter()
                .filter(|t| !redefined.contains(&t.name.as_str()))
                .collect(),
            manifests: Vec::new(),
            agents: Forbidden {
                path: real_path(agents_dir),
                what: "ateam's agent cache".into(),
                why: AGENTS,
            },
        };
        for g in given {
            fence.forbid_manifest(g, || "a manifest path given with -f".into());
        }
        // Where the store's teams were applied from stays forbidden; a team these -f paths
        // define again is now read from them instead (else a team once applied from a folder
        // could never be granted it after its manifests moved). A helper's request or
        // standard input brings no paths: there, the team's own stay forbidden.
        for t in applied {
            if !given.is_empty() && redefined.contains(&t.name.as_str()) {
                continue;
            }
            for m in &t.manifests {
                fence.forbid_manifest(m, || format!("where team `{}` was applied from", t.name));
            }
        }
        for d in engine_dirs {
            let path = real_path(&d.path);
            if !fence.engines.iter().any(|e| e.path == path) {
                fence.engines.push(Forbidden {
                    path,
                    what: d.what.clone(),
                    why: ENGINES,
                });
            }
        }
        for t in applied {
            let former = if redefined.contains(&t.name.as_str()) {
                "the former transcripts folder"
            } else {
                "the transcripts folder"
            };
            fence.forbid_session_dir(&t.name, &t.session_dir, former);
        }
        fence
    }

    /// Forbids `path` both as named and as the kernel resolves it (a symlink named with -f:
    /// its folder holds the link, its target the text).
    fn forbid_manifest(&mut self, path: &Path, what: impl Fn() -> String) {
        for p in [path.to_path_buf(), real_path(path)] {
            if !self.manifests.iter().any(|f| f.path == p) {
                self.manifests.push(Forbidden {
                    path: p,
                    what: what(),
                    why: MANIFESTS,
                });
            }
        }
    }

    /// A folder members may write (a write grant, or the team's transcripts folder, where each
    /// member owns its own) must not reach a manifest path nor the agent cache: the refusal
    /// names the first.
    pub(crate) fn check_writable(&self, dir: &Path) -> Result<(), String> {
        let mounts = self.mounts()?;
        for f in self.manifests.iter().chain([&self.agents]) {
            if let Some(r) = reach(dir, &f.path, mounts) {
                return Err(f.refusal(dir, &r));
            }
        }
        Ok(())
    }

    fn forbid_session_dir(&mut self, team: &str, dir: &Path, what: &str) {
        let path = real_path(dir);
        if !self.sessions.iter().any(|s| s.path == path) {
            self.sessions.push(Forbidden {
                path,
                what: format!("{what} of team `{team}`"),
                why: TRANSCRIPTS,
            });
        }
    }

    /// A team being validated keeps its transcripts in `dir` (which passed its own rules).
    pub(crate) fn add_session_dir(&mut self, team: &str, dir: &Path) {
        // Its own folder comes first: the team's current name for it wins over the store's.
        let path = real_path(dir);
        self.sessions.retain(|s| s.path != path);
        self.forbid_session_dir(team, dir, "the transcripts folder");
    }

    /// The mount table, where it could be read (else every grant is refused already).
    pub(crate) fn mount_table(&self) -> Option<&Mounts> {
        self.mounts.as_deref().ok()
    }

    fn mounts(&self) -> Result<&Mounts, String> {
        self.mounts.as_deref().map_err(|e| {
            format!(
                "cannot read the mount table /proc/self/mountinfo ({e}), which shows bind mounts"
            )
        })
    }

    /// A granted folder must reach no engine folder, no transcripts folder and not ateam's
    /// state: the refusal names the first it reaches.
    pub(crate) fn check_grant(&self, grant: &Path) -> Result<(), String> {
        let mounts = self.mounts()?;
        let all = self
            .engines
            .iter()
            .chain([&self.state])
            .chain(&self.sessions);
        for f in all {
            if let Some(r) = reach(grant, &f.path, mounts) {
                return Err(f.refusal(grant, &r));
            }
        }
        Ok(())
    }

    /// A team's transcripts folder must not meet an engine's folder, another team's
    /// transcripts folder (`teams`: those being validated, with theirs) or a folder that a
    /// team in the store grants its members.
    pub(crate) fn check_session_dir(
        &self,
        team: &str,
        dir: &Path,
        teams: &[(&str, PathBuf)],
    ) -> Result<(), String> {
        let mounts = self.mounts()?;
        for f in &self.engines {
            if let Some(r) = reach(dir, &f.path, mounts) {
                return Err(f.refusal(dir, &r));
            }
        }
        let stored = self
            .others
            .iter()
            .map(|t| (t.name.as_str(), &t.session_dir));
        let here = teams.iter().map(|(n, d)| (*n, d));
        for (other, other_dir) in here.chain(stored).filter(|(n, _)| *n != team) {
            if let Some(r) = reach(dir, other_dir, mounts) {
                let f = Forbidden {
                    path: other_dir.clone(),
                    what: format!("the transcripts folder of team `{other}`"),
                    why: "each team needs a transcripts folder of its own",
                };
                return Err(f.refusal(dir, &r));
            }
        }
        for t in &self.others {
            for g in &t.grants {
                for granted in g.read.iter().chain(&g.write) {
                    if let Some(r) = reach(granted, dir, mounts) {
                        let how = match r {
                            Reach::Mount(at) => format!(" through the mount at {}", at.display()),
                            Reach::Is { alias: true }
                            | Reach::Contains { alias: true }
                            | Reach::Inside { alias: true } => {
                                " under another name (same device and inode)".into()
                            }
                            Reach::Is { alias: false }
                            | Reach::Contains { alias: false }
                            | Reach::Inside { alias: false } => String::new(),
                        };
                        return Err(format!(
                            "`{}` would be reached by `{}`, a folder team `{}` grants its members (AccessGrant `{}`){how}; {TRANSCRIPTS}",
                            dir.display(),
                            granted.display(),
                            t.name,
                            g.name
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Device and inode of what `path` names now (following symlinks, as a mount would).
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl Forbidden {
    /// The message for `grant` reaching this folder: it names the folder, what it is and why
    /// it is never granted.
    pub fn refusal(&self, grant: &Path, how: &Reach) -> String {
        let (g, f, what) = (grant.display(), self.path.display(), &self.what);
        let alias = |a: &bool| {
            if *a {
                " under another name (same device and inode)"
            } else {
                ""
            }
        };
        let relation = match how {
            Reach::Is { alias: a } => format!("`{g}` is {f}, {what},{}", alias(a)),
            Reach::Contains { alias: a } => format!("`{g}` contains {f}, {what},{}", alias(a)),
            Reach::Inside { alias: a } => format!("`{g}` is inside {f}, {what},{}", alias(a)),
            Reach::Mount(at) => format!(
                "`{g}` reaches {f}, {what}, through the mount at {}",
                at.display()
            ),
        };
        format!("{}; {}", relation.trim_end_matches(','), self.why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mount table for a temp folder `t`: `t/b/alias` shows `t/a/sessions/members`, `t/c` is a
    /// tmpfs of its own.
    fn table(root_dev: &str, t: &Path) -> Mounts {
        let t = t.display();
        Mounts::parse(&format!(
            "1 0 {root_dev} / / rw - ext4 /dev/root rw\n\
             2 1 {root_dev} {t}/a/sessions/members {t}/b/alias rw - ext4 /dev/root rw\n\
             3 1 0:99 / {t}/c rw - tmpfs tmpfs rw\n"
        ))
    }

    #[test]
    fn reaches_by_name_identity_and_mounts() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        for d in ["a/sessions/members", "a/work", "b/alias", "c/x", "d"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        // A second name for a/sessions that the mount table does not show: a symlink, which
        // `identity` follows (as an engine's mount would).
        std::os::unix::fs::symlink(t.join("a"), t.join("d/link")).unwrap();
        let dev = {
            let m = std::fs::metadata(&t).unwrap();
            format!(
                "{}:{}",
                rustix::fs::major(m.dev()),
                rustix::fs::minor(m.dev())
            )
        };
        let mounts = table(&dev, &t);
        let sessions = t.join("a/sessions");
        let p = |s: &str| t.join(s);
        for (grant, folder, want) in [
            (p("a/sessions"), &sessions, Some(Reach::Is { alias: false })),
            (p("a"), &sessions, Some(Reach::Contains { alias: false })),
            (
                p("a/sessions/m1"),
                &sessions,
                Some(Reach::Inside { alias: false }),
            ),
            (p("a/work"), &sessions, None),
            (p("a/sessionsx"), &sessions, None),
            // Another name of a/, so of a folder around the transcripts.
            (
                p("d/link"),
                &sessions,
                Some(Reach::Contains { alias: true }),
            ),
            (
                p("d/link/sessions"),
                &sessions,
                Some(Reach::Is { alias: true }),
            ),
            (
                p("d/link/sessions/x"),
                &sessions,
                Some(Reach::Inside { alias: true }),
            ),
            // Not yet existing transcripts: reached through an existing ancestor.
            (
                p("d/link"),
                &p("a/new/sessions"),
                Some(Reach::Contains { alias: true }),
            ),
            // The mount table: b/alias shows a folder inside the transcripts.
            (p("b/alias"), &sessions, Some(Reach::Mount(p("b/alias")))),
            (p("b/alias/x"), &sessions, Some(Reach::Mount(p("b/alias")))),
            (p("b"), &sessions, Some(Reach::Mount(p("b/alias")))),
            (p("c"), &sessions, None),
            (p("c/x"), &p("c"), Some(Reach::Inside { alias: false })),
            // The forbidden folder named through the bind mount, the grant by its real name.
            (
                p("a/sessions"),
                &p("b/alias/m1"),
                Some(Reach::Mount(p("b/alias"))),
            ),
        ] {
            assert_eq!(
                reach(&grant, folder, &mounts),
                want,
                "{} -> {}",
                grant.display(),
                folder.display()
            );
        }
    }

    #[test]
    fn refusals_name_the_folder() {
        let f = Forbidden {
            path: "/srv/a/sessions".into(),
            what: "the transcripts folder of team `a`".into(),
            why: "members must not see each other's transcripts",
        };
        let g = Path::new("/srv/b/alias");
        assert_eq!(
            f.refusal(g, &Reach::Is { alias: true }),
            "`/srv/b/alias` is /srv/a/sessions, the transcripts folder of team `a`, under another name (same device and inode); members must not see each other's transcripts"
        );
        assert_eq!(
            f.refusal(Path::new("/srv"), &Reach::Contains { alias: false }),
            "`/srv` contains /srv/a/sessions, the transcripts folder of team `a`; members must not see each other's transcripts"
        );
        assert_eq!(
            f.refusal(Path::new("/srv/b"), &Reach::Mount("/srv/b/alias".into())),
            "`/srv/b` reaches /srv/a/sessions, the transcripts folder of team `a`, through the mount at /srv/b/alias; members must not see each other's transcripts"
        );
    }
}
