//! Whether a member's uid can write a folder, judged as the kernel would for a process with no
//! capabilities and no supplementary groups (a member has neither): by the folder's owner,
//! group and mode bits alone. ACLs are not read: a folder writable only through an ACL is
//! reported as not writable, the safe side of a refusal that names the fix.

use std::path::{Path, PathBuf};

use std::os::fd::AsFd;

use crate::model::UserId;

/// A folder's owner and mode, as `statx` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owned {
    /// The owning user.
    pub uid: u32,
    /// The owning group.
    pub gid: u32,
    /// The permission bits (`0o7777`).
    pub mode: u32,
}

impl Owned {
    /// Whether `user` may create files in a folder of this owner and mode: the kernel picks
    /// one class (owner, else group, else other) and needs its write and search bits. A member
    /// has no `CAP_DAC_OVERRIDE`, so uid 0 is judged like any other uid.
    pub fn writable_by(&self, user: UserId) -> bool {
        let bits = if self.uid == user.uid {
            self.mode >> 6
        } else if self.gid == user.gid {
            self.mode >> 3
        } else {
            self.mode
        };
        bits & 0o3 == 0o3
    }
}

/// A folder a member would get read-write but could not write: the grant itself, or a
/// folder below it (`check_writable_tree`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{}{} is owned by {}:{} with mode {:04o}, so the member's uid {} (gid {}) cannot write it{}; fix: {}",
    crate::core::untrusted::shown(&.path.to_string_lossy()), below(.grant, .path), .owned.uid, .owned.gid, .owned.mode, .user.uid,
    .user.gid, more_of(*.more), fix(self)
)]
pub struct NotWritable {
    /// The folder that cannot be written.
    pub path: PathBuf,
    /// The write grant it is in (the same path when it is the grant itself).
    pub grant: PathBuf,
    /// Its owner and mode.
    pub owned: Owned,
    /// Who the member would run as.
    pub user: UserId,
    /// Other folders of the grant that cannot be written either.
    pub more: usize,
}

fn below(grant: &Path, path: &Path) -> String {
    if grant == path {
        String::new()
    } else {
        format!(" (in the write grant {})", grant.display())
    }
}

/// The command that works: the member's own folder lacks only its write bit (a `chown` to
/// whom it already belongs would change nothing); another's is given to the member.
fn fix(e: &NotWritable) -> String {
    let grant = e.grant.display();
    if e.owned.uid == e.user.uid {
        format!(
            "`chmod -R u+w {grant}` (it is the member's uid's already; its owner may not write it)"
        )
    } else {
        format!(
            "`chown -R {}:{} {grant}` (or `chmod` so that this uid or gid may write them), or set `user` on the Member or Team to the folder's owner (with rootless Podman, members run as you: give the folders to yourself)",
            e.user.uid, e.user.gid
        )
    }
}

fn more_of(n: usize) -> String {
    match n {
        0 => String::new(),
        n => format!(", nor {n} more folder(s) of the grant"),
    }
}

impl NotWritable {
    /// The grant `path` itself cannot be written.
    pub fn top(path: &Path, owned: Owned, user: UserId) -> NotWritable {
        NotWritable {
            path: path.to_path_buf(),
            grant: path.to_path_buf(),
            owned,
            user,
            more: 0,
        }
    }
}

/// How much of a write grant's tree `check_writable_tree` looks at: a repository with its
/// dependencies may hold millions of files, and a member may make its tree deep or wide.
pub const TREE_BOUNDS: crate::files::Bounds = crate::files::Bounds {
    depth: 64,
    entries: 100_000,
};

/// How a grant's tree was judged: how many folders were looked at, and whether that was all
/// of them (a walk that stopped at `TREE_BOUNDS` did not judge the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeJudged {
    /// Folders judged, the grant's own included.
    pub folders: usize,
    /// Every folder of the grant was judged.
    pub complete: bool,
}

/// `check_writable` for the grant and every folder below it, within `bounds`, never
/// following a link (a member's tree may hold any). The first folder `user` cannot write is
/// named, with how many more. Files are not judged: git's objects are read-only by design,
/// and a member that can write a folder can replace what is in it.
pub fn check_writable_tree(
    path: &Path,
    user: UserId,
    bounds: crate::files::Bounds,
) -> Result<TreeJudged, NotWritable> {
    check_writable(path, user)?;
    let Ok(dir) = crate::files::Dir::open(path) else {
        // Not judged here, as `check_writable` says.
        return Ok(TreeJudged {
            folders: 1,
            complete: false,
        });
    };
    let mut folders = 1;
    let mut refused: Option<NotWritable> = None;
    let complete = dir.walk_dirs(bounds, |e| {
        folders += 1;
        let owned = Owned {
            uid: e.uid,
            gid: e.gid,
            mode: e.mode,
        };
        if owned.writable_by(user) {
            return;
        }
        match &mut refused {
            Some(r) => r.more += 1,
            None => {
                refused = Some(NotWritable {
                    path: path.join(&e.rel),
                    grant: path.to_path_buf(),
                    owned,
                    user,
                    more: 0,
                })
            }
        }
    });
    match refused {
        Some(r) => Err(r),
        None => Ok(TreeJudged { folders, complete }),
    }
}

/// The owner and mode of the folder at `path`, opened without following any symlink (as a
/// grant is pinned: `runtime::pin`).
pub fn owned(path: &Path) -> std::io::Result<Owned> {
    let fd = crate::files::folder_handle(path)?;
    let st = crate::files::handle_stat(fd.as_fd())?;
    Ok(Owned {
        uid: st.stx_uid,
        gid: st.stx_gid,
        mode: u32::from(st.stx_mode) & 0o7777,
    })
}

/// `Err` naming the folder, its owner and mode, and the fix, when `user` cannot write it.
/// A folder that cannot be looked at is not judged here (pinning it says why, later).
pub fn check_writable(path: &Path, user: UserId) -> Result<(), NotWritable> {
    match owned(path) {
        Ok(owned) if !owned.writable_by(user) => Err(NotWritable::top(path, owned, user)),
        Ok(_) | Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: UserId = UserId {
        uid: 1000,
        gid: 1000,
    };

    fn o(uid: u32, gid: u32, mode: u32) -> Owned {
        Owned { uid, gid, mode }
    }

    #[test]
    fn one_class_decides_as_the_kernel_does() {
        assert!(o(1000, 0, 0o755).writable_by(U), "owner with u+wx");
        assert!(
            !o(1000, 1000, 0o577).writable_by(U),
            "owner without u+w: g and o do not help"
        );
        assert!(o(0, 1000, 0o775).writable_by(U), "group with g+wx");
        assert!(
            !o(0, 1000, 0o757).writable_by(U),
            "group without g+w: o does not help"
        );
        assert!(o(0, 0, 0o777).writable_by(U), "others with o+wx");
        assert!(o(0, 0, 0o1777).writable_by(U), "sticky /tmp-like");
        assert!(!o(0, 0, 0o755).writable_by(U), "root's folder");
        assert!(!o(1000, 0, 0o655).writable_by(U), "write without search");
        let root = UserId { uid: 0, gid: 0 };
        assert!(
            !o(1000, 1000, 0o755).writable_by(root),
            "no CAP_DAC_OVERRIDE"
        );
    }

    #[test]
    fn a_real_folder_is_judged_by_its_owner_and_mode() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let me = UserId {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(check_writable(d.path(), me), Ok(()));
        let other = UserId {
            uid: me.uid + 1,
            gid: me.gid + 1,
        };
        let e = check_writable(d.path(), other).unwrap_err();
        assert_eq!(e.owned.mode, 0o700);
        let text = e.to_string();
        assert!(text.contains("with mode 0700"), "{text}");
        assert!(text.contains(&format!("uid {}", other.uid)), "{text}");
        assert!(text.contains("chown"), "{text}");
        // The member's own folder, without its write bit: chown would change nothing.
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o500)).unwrap();
        let e = check_writable(d.path(), me).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&format!("`chmod -R u+w {}`", d.path().display())),
            "{text}"
        );
        assert!(!text.contains("chown"), "{text}");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }

    /// As the issue found it: `chown DIR` of the grant only leaves its subfolders the
    /// person's; the tree check names the first, counts the rest, says `chown -R`, follows no
    /// link and stops at its bounds.
    #[test]
    fn a_grant_is_judged_through_its_tree() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let top = d.path().join("repo");
        for sub in ["a/b", "c", "d"] {
            std::fs::create_dir_all(top.join(sub)).unwrap();
        }
        let me = UserId {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        let member = UserId {
            uid: me.uid + 7,
            gid: me.gid + 7,
        };
        let open = std::fs::Permissions::from_mode(0o777);
        let closed = std::fs::Permissions::from_mode(0o755);
        for p in ["", "a", "a/b", "c", "d"] {
            std::fs::set_permissions(top.join(p), open.clone()).unwrap();
        }
        let all = check_writable_tree(&top, member, TREE_BOUNDS).unwrap();
        assert_eq!(
            all,
            TreeJudged {
                folders: 5,
                complete: true
            }
        );
        // A link to a folder the member cannot write is not followed.
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::set_permissions(&outside, closed.clone()).unwrap();
        std::os::unix::fs::symlink(&outside, top.join("link")).unwrap();
        assert!(check_writable_tree(&top, member, TREE_BOUNDS).is_ok());
        for p in ["a/b", "d"] {
            std::fs::set_permissions(top.join(p), closed.clone()).unwrap();
        }
        let e = check_writable_tree(&top, member, TREE_BOUNDS).unwrap_err();
        assert_eq!((e.path.clone(), e.more), (top.join("a/b"), 1), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(&format!("(in the write grant {})", top.display())),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "`chown -R {}:{} {}`",
                member.uid,
                member.gid,
                top.display()
            )),
            "{text}"
        );
        assert!(text.contains("nor 1 more folder(s)"), "{text}");
        // A folder the member named is shown escaped: its name may steer a terminal.
        let hostile = top.join("d/\u{1b}]2;pwned\u{7}");
        std::fs::create_dir(&hostile).unwrap();
        std::fs::set_permissions(top.join("a/b"), open.clone()).unwrap();
        std::fs::set_permissions(top.join("d"), open.clone()).unwrap();
        std::fs::set_permissions(&hostile, closed.clone()).unwrap();
        let e = check_writable_tree(&top, member, TREE_BOUNDS).unwrap_err();
        assert!(!e.to_string().contains('\u{1b}'), "{e}");
        std::fs::set_permissions(&hostile, open.clone()).unwrap();
        // Past its bounds the walk stops, and says it did not see everything.
        std::fs::set_permissions(top.join("a/b"), open.clone()).unwrap();
        std::fs::set_permissions(top.join("d"), open).unwrap();
        let tight = crate::files::Bounds {
            depth: 1,
            entries: 100,
        };
        assert!(!check_writable_tree(&top, member, tight).unwrap().complete);
    }
}
