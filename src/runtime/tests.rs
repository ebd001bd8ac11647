//! Bringing a member up against the fake engine (`backend::fake`), in a temp dir: what
//! `prepare` writes, the order of the engine calls of `launch` and `restart`, and what each
//! failure leaves (the gate closed, the container removed, the record). Pinning, the process
//! checks and the release run for real, on the rig's `Init`; what a real container adds
//! (the control folder at `/.ateam`, limits in its own cgroup) is tested under tests/.

use super::pin::PinError;
use super::rig::{Init, Rig, under};
use super::*;
use crate::backend::ImageConfig;
use crate::backend::fake::{Call, Fault};
use crate::core::container::ContainerState;

fn no_secret(_: &str) -> Option<String> {
    None
}

/// The member's write grant swapped for a symlink to another folder.
fn swap_repo(rig: &Rig) {
    std::fs::rename(under(rig, "repo"), under(rig, "repo-moved")).unwrap();
    std::fs::create_dir(under(rig, "elsewhere")).unwrap();
    std::os::unix::fs::symlink(under(rig, "elsewhere"), under(rig, "repo")).unwrap();
}

/// The member's container `old1`, exited, as an earlier apply made it (its folders too).
async fn made_before(rig: &Rig) {
    rig.rt.prepare(&rig.member, &no_secret).await.unwrap();
    rig.fake
        .add(rig.existing("old1", ContainerState::Exited { code: 1 }, None));
}

#[tokio::test]
async fn prepare_writes_the_control_folder_with_the_gate_closed_and_asks_the_engine_nothing() {
    let mut rig = Rig::new();
    rig.member.spec.secret_env = vec!["KEY".into()];
    let ctl = rig.member.ctl_dir.clone();
    std::fs::create_dir_all(&ctl).unwrap();
    std::fs::write(ctl.join("go"), "an earlier release").unwrap();
    let secret = |name: &str| (name == "KEY").then(|| "v4lue".to_string());
    let p = rig.rt.prepare(&rig.member, &secret).await.unwrap();
    assert!(!ctl.join("go").exists(), "the gate is closed");
    assert!(ctl.join("gate").is_file(), "the gate is installed");
    assert_eq!(std::fs::read(ctl.join("secrets")).unwrap(), b"KEY=v4lue\0");
    assert!(rig.member.transcript_dir.is_dir());
    assert_eq!(p.request.name, rig.member.spec.name);
    assert_eq!(p.request.cmd, vec!["sleep", "600"]);
    assert_eq!(p.pins.len(), rig.member.spec.mounts.len());
    assert_eq!(rig.fake.calls(), vec![], "the command is given, no network");
}

#[tokio::test]
async fn prepare_refuses_a_missing_secret_and_an_image_without_a_command() {
    let mut rig = Rig::new();
    rig.member.spec.secret_env = vec!["KEY".into()];
    let e = rig.rt.prepare(&rig.member, &no_secret).await.unwrap_err();
    assert!(
        matches!(e, RunError::MissingSecret { ref name, .. } if name == "KEY"),
        "{e}"
    );
    rig.member.spec.secret_env.clear();
    rig.member.spec.command = None;
    rig.fake.set_image(ImageConfig::default());
    let e = rig.rt.prepare(&rig.member, &no_secret).await.unwrap_err();
    assert!(matches!(e, RunError::NoCommand { .. }), "{e}");
    assert_eq!(
        rig.fake.calls(),
        vec![Call::ImageConfig {
            image: rig.member.spec.image.clone()
        }]
    );
}

#[tokio::test]
async fn prepare_refuses_a_grant_swapped_for_a_symlink_before_any_create() {
    let rig = Rig::new();
    swap_repo(&rig);
    let e = rig.rt.prepare(&rig.member, &no_secret).await.unwrap_err();
    assert!(
        matches!(&e, RunError::Pin { source: PinError::Open { path, .. }, .. } if *path == under(&rig, "repo")),
        "{e}"
    );
    assert_eq!(rig.fake.calls(), vec![]);
}

#[tokio::test]
async fn launch_checks_before_and_after_start_then_releases_this_start() {
    let rig = Rig::new();
    let init = Init::spawn();
    rig.fake.set_pid(Some(init.pid()));
    let p = rig.rt.prepare(&rig.member, &no_secret).await.unwrap();
    let id = rig.rt.launch(p, None).await.unwrap();
    assert_eq!(
        rig.fake.calls(),
        vec![
            Call::Create {
                name: rig.member.spec.name.clone()
            },
            Call::Inspect { id: id.clone() },
            Call::Start { id: id.clone() },
            Call::Inspect { id: id.clone() },
        ]
    );
    let token = procfs::start_token(init.pid()).unwrap();
    assert_eq!(rig.released(), Some(format!("{id} {token}")));
    assert!(rig.recorded().contains(&id), "recorded before it starts");
}

#[tokio::test]
async fn a_container_that_differs_after_create_is_removed_unstarted() {
    let rig = Rig::new();
    rig.fake.doctor(|i| i.effective.privileged = true);
    let p = rig.rt.prepare(&rig.member, &no_secret).await.unwrap();
    let e = rig.rt.launch(p, None).await.unwrap_err();
    let RunError::PolicyViolation { stage, id, .. } = e else {
        panic!("{e}")
    };
    assert_eq!(stage, "after create");
    assert_eq!(
        rig.fake.calls(),
        vec![
            Call::Create {
                name: rig.member.spec.name.clone()
            },
            Call::Inspect { id: id.clone() },
            Call::Remove { id: id.clone() },
        ]
    );
    assert_eq!(rig.released(), None);
    assert!(
        rig.recorded().is_empty(),
        "a removed container is forgotten"
    );
    assert!(rig.fake.containers().is_empty());
}

#[tokio::test]
async fn a_container_that_stops_before_release_says_its_exit_and_last_output() {
    let rig = Rig::new();
    rig.fake.set_pid(None);
    rig.fake.set_logs("sleep: not found\n");
    let p = rig.rt.prepare(&rig.member, &no_secret).await.unwrap();
    let e = rig.rt.launch(p, None).await.unwrap_err();
    let RunError::Process { id, what, .. } = e else {
        panic!("{e}")
    };
    assert!(what.contains("exit code 127 (command not found)"), "{what}");
    assert!(what.contains("\n    sleep: not found"), "{what}");
    let calls = rig.fake.calls();
    assert_eq!(calls[2], Call::Start { id: id.clone() });
    assert_eq!(calls.last(), Some(&Call::Remove { id }));
    assert_eq!(rig.released(), None);
}

#[tokio::test]
async fn a_failed_rollback_is_said_with_its_cause_and_the_id_stays_recorded() {
    let rig = Rig::new();
    let init = Init::spawn();
    rig.fake.set_pid(Some(init.pid()));
    // Differs once started: the check after start refuses it.
    rig.fake.doctor(|i| {
        if i.summary.state == ContainerState::Running {
            i.effective.cap_add = vec!["SYS_ADMIN".into()];
        }
    });
    rig.fake.fail(Fault::nth("remove", 1));
    let p = rig.rt.prepare(&rig.member, &no_secret).await.unwrap();
    let e = rig.rt.launch(p, None).await.unwrap_err();
    let RunError::Rollback { cause, id, .. } = e else {
        panic!("{e}")
    };
    assert!(
        matches!(
            *cause,
            RunError::PolicyViolation {
                stage: "after start",
                ..
            }
        ),
        "{cause}"
    );
    assert_eq!(rig.released(), None, "never released");
    assert!(rig.fake.containers().contains_key(&id), "still there");
    assert!(rig.recorded().contains(&id), "so the next apply finds it");
}

#[tokio::test]
async fn a_restart_is_checked_after_its_start_and_releases_the_new_start() {
    let rig = Rig::new();
    let init = Init::spawn();
    rig.fake.set_pid(Some(init.pid()));
    made_before(&rig).await;
    rig.rt.restart(&rig.member, "old1").await.unwrap();
    let old = || "old1".to_string();
    // The look that planned the restart judged the container just before: no inspect
    // between it and the start, the one after it before the release.
    assert_eq!(
        rig.fake.calls(),
        vec![Call::Start { id: old() }, Call::Inspect { id: old() }]
    );
    let token = procfs::start_token(init.pid()).unwrap();
    assert_eq!(rig.released(), Some(format!("old1 {token}")));
}

#[tokio::test]
async fn a_restart_with_a_grant_swapped_is_removed_never_started() {
    let rig = Rig::new();
    made_before(&rig).await;
    std::fs::write(rig.member.ctl_dir.join("go"), "old1 an earlier start").unwrap();
    swap_repo(&rig);
    let e = rig.rt.restart(&rig.member, "old1").await.unwrap_err();
    assert!(
        matches!(&e, RunError::Pin { source: PinError::Open { path, .. }, .. } if *path == under(&rig, "repo")),
        "{e}"
    );
    assert_eq!(rig.fake.calls(), vec![Call::Remove { id: "old1".into() }]);
    assert_eq!(rig.released(), None, "the earlier release is gone");
}
