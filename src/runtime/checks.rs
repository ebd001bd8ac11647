//! What is checked of a member before anything of it is made: its limits, its user, its
//! folders (read-only ones not writable below, write grants writable as its user), its
//! transcript folder.

use std::path::PathBuf;

use super::pin::{self, Pinned};
use super::{RunError, Runtime};
use crate::core::container::EngineKind;
use crate::files::Owner;
use crate::host::mounts::Mounts;
use crate::plan::spec::DesiredMember;
use crate::policy::Limits;

impl Runtime {
    /// Refuses a member whose memory and pids limits this engine would ignore, unless its
    /// team allows it.
    pub fn check_limits(&self, m: &DesiredMember) -> Result<(), RunError> {
        self.limits(m).map(|_| ())
    }

    pub(super) fn limits(&self, m: &DesiredMember) -> Result<Limits, RunError> {
        match (self.info.limits_enforced, m.allow_unenforced_limits) {
            (true, _) => Ok(Limits::Enforced),
            (false, true) => Ok(Limits::Unenforced),
            (false, false) => Err(RunError::LimitsNotEnforced {
                member: m.member.clone(),
                engine: self.info.kind.to_string(),
            }),
        }
    }

    /// The user a member runs as, who owns its transcript and control folders, so that it can
    /// read its gate, secrets and release file and write its transcript, and nothing else of
    /// ateam's.
    pub fn member_owner(&self, m: &DesiredMember) -> Result<Owner, RunError> {
        let user: crate::model::UserId =
            m.spec
                .user
                .parse()
                .map_err(|what: String| RunError::Process {
                    member: m.member.clone(),
                    id: String::new(),
                    what,
                })?;
        let owner = Owner {
            uid: user.uid,
            gid: user.gid,
        };
        if self.info.kind == (EngineKind::Podman { rootless: true }) && owner != self.owner {
            return Err(RunError::RootlessUser {
                member: m.member.clone(),
                user: m.spec.user.clone(),
                caller: format!("{}:{}", self.owner.uid, self.owner.gid),
            });
        }
        Ok(owner)
    }

    /// Refuses a member that would get a writable file system below one of its read-only
    /// folders: the engines bind folders recursively, but make only the top read-only.
    pub fn check_read_only(&self, m: &DesiredMember) -> Result<(), RunError> {
        if pin::read_only_is_recursive(self.info.kind) {
            return Ok(());
        }
        let table = Mounts::read().map_err(|source| RunError::Io {
            member: m.member.clone(),
            path: "/proc/self/mountinfo".into(),
            source,
        })?;
        match pin::mount_below_read_only(&m.spec.mounts, &table) {
            None => Ok(()),
            Some((folder, mount)) => Err(RunError::WritableBelowReadOnly {
                member: m.member.clone(),
                folder: folder.source.clone(),
                mount,
                engine: self.info.kind.to_string(),
            }),
        }
    }

    /// The member's uid and gid, as the write checks judge them.
    fn member_user(&self, m: &DesiredMember) -> Result<crate::model::UserId, RunError> {
        let owner = self.member_owner(m)?;
        Ok(crate::model::UserId {
            uid: owner.uid,
            gid: owner.gid,
        })
    }

    /// Refuses a member whose uid could not write one of its write grants, or a folder in
    /// one (by owner, group and mode bits; `check_writable_tree`). Its transcript folder ateam makes the member's, and HOME is a tmpfs of
    /// its own (`plan::spec`): only the grants can be wrong.
    pub fn check_writable(&self, m: &DesiredMember) -> Result<(), RunError> {
        let user = self.member_user(m)?;
        for mount in granted_writes(m) {
            let bounds = crate::host::access::TREE_BOUNDS;
            let judged = crate::host::access::check_writable_tree(&mount.source, user, bounds)
                .map_err(|source| RunError::NotWritable {
                    member: m.member.clone(),
                    source,
                })?;
            if !judged.complete {
                tracing::warn!(
                    member = %m.member,
                    grant = %mount.source.display(),
                    folders = judged.folders,
                    "only part of the write grant's tree was judged writable (it is larger than {} entries or {} levels); the rest was not looked at",
                    bounds.entries,
                    bounds.depth
                );
            }
        }
        Ok(())
    }

    /// Refuses a member whose transcript folder the person running ateam could not make (the
    /// nearest folder that exists is not theirs to write) or give to the member's uid (it
    /// exists with another owner, and only root may change that).
    pub fn check_transcript_dir(&self, m: &DesiredMember) -> Result<(), RunError> {
        use std::os::unix::fs::MetadataExt;
        // A user this engine refuses is said by `member_owner`'s own check.
        let Ok(owner) = self.member_owner(m) else {
            return Ok(());
        };
        let path = &m.transcript_dir;
        let refuse = |why: String, fix: String| RunError::TranscriptFolder {
            member: m.member.clone(),
            path: path.clone(),
            why,
            fix,
        };
        let me = format!("{}:{}", self.owner.uid, self.owner.gid);
        match std::fs::symlink_metadata(path) {
            Ok(md) if !md.is_dir() => Err(refuse(
                "it exists and is not a folder (a link is never followed)".into(),
                "move it away, or set the Team's sessionDir to another folder".into(),
            )),
            Ok(md) if (md.uid(), md.gid()) != (owner.uid, owner.gid) && self.owner.uid != 0 => {
                Err(refuse(
                    format!(
                        "it is owned by {}:{}, and ateam (running as {me}) may not give it to the member's {}:{}",
                        md.uid(),
                        md.gid(),
                        owner.uid,
                        owner.gid
                    ),
                    format!(
                        "remove it (its transcripts go with it) or move it away, or `sudo chown -R {}:{} {}`",
                        owner.uid,
                        owner.gid,
                        path.display()
                    ),
                ))
            }
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let Some(up) = path
                    .ancestors()
                    .skip(1)
                    .find(|p| p.symlink_metadata().is_ok())
                else {
                    return Ok(());
                };
                let access = rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK;
                match rustix::fs::access(up, access) {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        let owned = std::fs::metadata(up)
                            .map(|md| {
                                format!(
                                    ", owned by {}:{} with mode {:04o}",
                                    md.uid(),
                                    md.gid(),
                                    md.mode() & 0o7777
                                )
                            })
                            .unwrap_or_default();
                        Err(refuse(
                            format!(
                                "ateam (running as {me}) cannot make it in {}{owned} ({e})",
                                up.display()
                            ),
                            format!(
                                "set the Team's sessionDir to a folder you own, or give {} to {me} (`sudo chown {me} {}`)",
                                up.display(),
                                up.display()
                            ),
                        ))
                    }
                }
            }
            Err(e) => Err(refuse(
                e.to_string(),
                "check the folder and its parents".into(),
            )),
        }
    }

    /// `check_writable` again, on the folders as pinned: the very ones the engine mounts.
    pub(super) fn check_pinned_writable(
        &self,
        m: &DesiredMember,
        pins: &[(PathBuf, Pinned)],
    ) -> Result<(), RunError> {
        let user = self.member_user(m)?;
        for mount in granted_writes(m) {
            if let Some((_, pinned)) = pins.iter().find(|(t, _)| *t == mount.target)
                && !pinned.owned.writable_by(user)
            {
                return Err(RunError::NotWritable {
                    member: m.member.clone(),
                    source: crate::host::access::NotWritable::top(
                        &mount.source,
                        pinned.owned,
                        user,
                    ),
                });
            }
        }
        Ok(())
    }
}

/// The member's read-write mounts that are its grants: not its transcript folder nor its
/// control folder, which ateam makes the member's.
fn granted_writes(m: &DesiredMember) -> impl Iterator<Item = &crate::core::container::Mount> {
    m.spec
        .mounts
        .iter()
        .filter(|x| !x.read_only && x.source != m.transcript_dir && x.source != m.ctl_dir)
}
