//! A test rig for the layers above the engine: one member whose folders are in a temp dir, a
//! `Runtime` on a `FakeBackend`, and `Init`, a stand-in for a container's first process that
//! passes the kernel's checks (no capabilities, no-new-privileges, the member's uid), so that
//! a launch can get as far as the gate's release without an engine.
//!
//! Two things a real container has are left out: the control folder is mounted at its host
//! path, not at `/.ateam` (`Init` sees the host's root, where `pin::check` looks), and limits
//! are unenforced (`Init` lives in the test's cgroup, not one with the member's limits).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Runtime, procfs};
use crate::backend::fake::FakeBackend;
use crate::backend::{EngineInfo, Inspected, Summary};
use crate::core::container::{CTL_TARGET, ContainerState};
use crate::files::Owner;
use crate::model::{Model, Team, UserId};
use crate::plan::spec::{DesiredMember, DesiredState, desired_state};
use crate::store::Record;

/// The team's name in every rig.
pub(crate) const TEAM: &str = "t";

pub(crate) struct Rig {
    pub dir: tempfile::TempDir,
    pub fake: Arc<FakeBackend>,
    pub rt: Runtime,
    pub desired: DesiredState,
    /// Member `m`, granted `<dir>/docs` to read and `<dir>/repo` to write.
    pub member: DesiredMember,
}

impl Rig {
    pub(crate) fn new() -> Rig {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path();
        for d in ["docs", "repo"] {
            std::fs::create_dir(root.join(d)).expect("a grant");
        }
        let owner = me();
        let mut m = crate::plan::tests::member("m");
        m.user = Some(UserId {
            uid: owner.uid,
            gid: owner.gid,
        });
        m.access.read = vec![root.join("docs")];
        m.access.write = vec![root.join("repo")];
        m.cwd = root.join("repo");
        m.command = Some(vec!["sleep".into(), "600".into()]);
        m.transcript_dir = root.join("sessions/members/m");
        let host = crate::host::Host {
            uid: owner.uid,
            gid: owner.gid,
            home: root.to_path_buf(),
            memory_bytes: 16 << 30,
            state_dir: root.join("state"),
            sudo_user: None,
            engine_dirs: Default::default(),
        };
        let desired = desired_state(&team(m, root), &host);
        let mut member = desired.members[0].clone();
        member
            .spec
            .mounts
            .retain(|x| x.target != Path::new(CTL_TARGET));
        member
            .spec
            .mounts
            .push(crate::core::container::Mount::same(&member.ctl_dir, true));
        member.hash = member.spec.hash();
        let fake = Arc::new(FakeBackend::default());
        fake.set_effective(crate::policy::compliant(&member.spec));
        let rt = Runtime {
            backend: fake.clone(),
            info: EngineInfo {
                limits_enforced: false,
                ..crate::backend::fake::info()
            },
            store: desired.store.clone(),
            owner,
            state_dir: host.state_dir,
            looked: Default::default(),
        };
        Rig {
            dir,
            fake,
            rt,
            desired: DesiredState {
                members: vec![member.clone()],
                ..desired
            },
            member,
        }
    }

    /// What team `t` wants when its members are `names` (each like `m`, its folders under
    /// this rig's), on this rig's host.
    pub(crate) fn desired_of(&self, names: &[&str]) -> DesiredState {
        let root = self.dir.path();
        let mut team = team(crate::plan::tests::member("m"), root);
        team.teams[0].members = names
            .iter()
            .map(|n| {
                let mut m = crate::plan::tests::member(n);
                m.cwd = root.join("repo");
                m.transcript_dir = root.join("sessions/members").join(n);
                m
            })
            .collect();
        desired_state(&team, &self.host())
    }

    fn host(&self) -> crate::host::Host {
        crate::host::Host {
            uid: self.rt.owner.uid,
            gid: self.rt.owner.gid,
            home: self.dir.path().to_path_buf(),
            memory_bytes: 16 << 30,
            state_dir: self.rt.state_dir.clone(),
            sudo_user: None,
            engine_dirs: Default::default(),
        }
    }

    /// The gate's release file, if the member was released.
    pub(crate) fn released(&self) -> Option<String> {
        std::fs::read_to_string(self.member.ctl_dir.join("go")).ok()
    }

    /// The ids in the member's record.
    pub(crate) fn recorded(&self) -> BTreeSet<String> {
        Record::load(&self.member.record).ids
    }

    /// A container of the member, as ateam made it, already on the engine.
    pub(crate) fn existing(&self, id: &str, state: ContainerState, pid: Option<u32>) -> Inspected {
        Inspected {
            summary: Summary {
                id: id.into(),
                name: self.member.spec.name.clone(),
                labels: self.member.container_labels(&self.rt.store),
                state,
                created: 1,
            },
            effective: crate::policy::compliant(&self.member.spec),
            pid,
            pid_files: None,
            image: self.member.spec.image.clone(),
            image_id: String::new(),
            restart_count: 0,
            started_at: None,
            last_exit: None,
        }
    }
}

/// A team `t` of one member, its session folder in `root`; limits unenforced allowed.
fn team(m: crate::model::Member, root: &Path) -> Model {
    Model {
        teams: vec![
            Team::named(TEAM, root.join("sessions"))
                .with_allow_root_user(true)
                .with_allow_unenforced_limits(true)
                .with_members(vec![m]),
        ],
    }
}

/// The user running the tests.
pub(crate) fn me() -> Owner {
    Owner {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
    }
}

/// A process as a container's first one looks to the kernel: `sleep`, with no capabilities
/// (bounding set empty), no-new-privileges, as the test's user, in a network namespace of its
/// own. Root drops its capabilities with `setpriv`; anyone else does it in a user namespace
/// of its own (`unshare`). Killed when dropped.
pub(crate) struct Init(std::process::Child);

impl Init {
    pub(crate) fn spawn() -> Init {
        let setpriv = [
            "setpriv",
            "--no-new-privs",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
            "sleep",
            "600",
        ];
        // A network namespace of its own, loopback alone, as a member's (the release checks).
        let unshare: &[&str] = if rustix::process::getuid().is_root() {
            &["unshare", "--net", "--"]
        } else {
            &["unshare", "--user", "--map-root-user", "--net", "--"]
        };
        let args: Vec<&str> = unshare.iter().copied().chain(setpriv).collect();
        let child = std::process::Command::new(args[0])
            .args(&args[1..])
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("setpriv (util-linux) runs");
        let init = Init(child);
        let pid = init.pid();
        // setpriv execs sleep in the same process: wait for the capabilities to be gone.
        for _ in 0..200 {
            if let Ok(st) = procfs::status(pid)
                && st.cap_bnd == 0
                && st.cap_eff == 0
                && st.no_new_privs
            {
                return init;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!(
            "could not start a process without capabilities (root, or user namespaces, needed): {:?}",
            procfs::status(pid)
        );
    }

    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Init {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The labels of containers of the rig's store.
pub(crate) fn ours(store: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            crate::core::container::labels::MANAGED_BY.to_string(),
            "ateam".to_string(),
        ),
        (
            crate::core::container::labels::STORE.to_string(),
            store.to_string(),
        ),
    ])
}

/// A path under the rig's folder.
pub(crate) fn under(rig: &Rig, rel: &str) -> PathBuf {
    rig.dir.path().join(rel)
}
