//! Whether a member's uid can write a folder, judged as the kernel would for a process with no
//! capabilities and no supplementary groups (a member has neither): by the folder's owner,
//! group and mode bits alone. ACLs are not read: a folder writable only through an ACL is
//! reported as not writable, the safe side of a refusal that names the fix.

use std::path::{Path, PathBuf};

use rustix::fs::{CWD, Mode, OFlags, ResolveFlags, StatxFlags, openat2, statx};

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

/// A folder a member would get read-write but could not write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} is owned by {}:{} with mode {:04o}, so the member's uid {} (gid {}) cannot write it; fix: `chown {}:{} {}` (or `chmod` it so that this uid or gid may write it), or set `user` on the Member or Team to the folder's owner",
    .path.display(), .owned.uid, .owned.gid, .owned.mode, .user.uid, .user.gid,
    .user.uid, .user.gid, .path.display()
)]
pub struct NotWritable {
    /// The folder, as granted.
    pub path: PathBuf,
    /// Its owner and mode.
    pub owned: Owned,
    /// Who the member would run as.
    pub user: UserId,
}

/// The owner and mode of the folder at `path`, opened without following any symlink (as a
/// grant is pinned: `runtime::pin`).
pub fn owned(path: &Path) -> std::io::Result<Owned> {
    let fd = openat2(
        CWD,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?;
    let st = statx(
        &fd,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        StatxFlags::BASIC_STATS,
    )?;
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
        Ok(owned) if !owned.writable_by(user) => Err(NotWritable {
            path: path.to_path_buf(),
            owned,
            user,
        }),
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
    }
}
