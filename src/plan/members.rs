//! Each wanted member in the plan: its proxy, helper server and transcript folder, then its
//! container: made, finished after an interrupted recreate, kept up to date, and running as its
//! restart policy says (unless the crash-loop policy holds the restart back).

use std::time::SystemTime;

use serde_json::Value;

use super::{
    Action, ContainerOp, ContainerState, Deferred, DesiredMember, Drift, Finding, HostOp,
    ObservedContainer, Pass, Plan, Removal, ServerOp, StartReason, cref, diff_values, owned_key,
};
use crate::core::container::{self as names, labels};
use crate::model::RestartPolicy;
use crate::policy::{self, Violation};

impl<'a> Pass<'a> {
    /// What runs beside the member's container: its egress proxy, its helper server, and the
    /// folder of its transcript.
    pub(super) fn plan_services(&self, m: &DesiredMember, plan: &mut Plan) {
        let observed = self.observed;
        if let Some(e) = &m.egress {
            if !observed.live_sockets.contains(&e.socket) {
                let (socket, policy) = (e.socket.clone(), e.policy.clone());
                plan.actions
                    .push(Action::of(m, ServerOp::StartEgress { socket, policy }));
            } else if observed.egress_policies.get(&e.socket) != Some(&e.policy) {
                let policy = e.policy.clone();
                plan.actions
                    .push(Action::of(m, ServerOp::UpdateEgress { policy }));
            }
        }
        if let Some(socket) = &m.helpers
            && !observed.live_sockets.contains(socket)
        {
            plan.actions.push(Action::of(m, ServerOp::StartHelper));
        }
        if !observed.transcript_dirs.contains(&m.transcript_dir) {
            let path = m.transcript_dir.clone();
            plan.actions
                .push(Action::of(m, HostOp::MakeTranscriptDir { path }));
        }
    }

    /// A suspended member: every container of its goes (its state is outside them: grants,
    /// workspace, transcript folder, and HOME kept there by `ateam suspend`), and so do its
    /// proxy and helper server; nothing is started. (Its board tasks go back: `return_tasks`.)
    pub(super) fn plan_suspended(
        &self,
        m: &DesiredMember,
        since: &str,
        mine: Vec<&ObservedContainer>,
        plan: &mut Plan,
    ) {
        for c in mine {
            let (container, removal) = (cref(c), Removal::Suspended);
            plan.actions
                .push(Action::of(m, ContainerOp::Remove { container, removal }));
        }
        let live = |s: &std::path::PathBuf| self.observed.live_sockets.contains(s);
        if m.egress.as_ref().is_some_and(|e| live(&e.socket)) {
            plan.actions.push(Action::of(m, ServerOp::StopEgress));
        }
        if m.helpers.as_ref().is_some_and(live) {
            plan.actions.push(Action::of(m, ServerOp::StopHelper));
        }
        plan.findings.push(Finding::Suspended {
            team: m.team.clone(),
            member: m.member.clone(),
            since: since.to_string(),
        });
    }

    /// The member's container, given `mine`: every container this store made for it.
    pub(super) fn plan_containers(
        &self,
        m: &DesiredMember,
        mine: Vec<&ObservedContainer>,
        plan: &mut Plan,
    ) {
        if mine.is_empty() {
            self.create(m, plan);
            return;
        }
        // A replacement left by an interrupted recreate: finish it if the old container is
        // gone (it was verified before the old one was removed), undo it otherwise.
        let (replacements, mine): (Vec<&ObservedContainer>, Vec<&ObservedContainer>) = mine
            .into_iter()
            .partition(|c| names::is_replacement(&m.spec.name, &c.name, &c.labels));
        if mine.is_empty() {
            finish_replacement(m, &replacements, plan);
            return;
        }
        let keep = pick_keeper(&mine, &m.hash);
        let extra = mine.iter().filter(|c| c.id != keep.id);
        for c in replacements.iter().chain(extra) {
            plan.actions.push(remove_duplicate(m, c));
        }
        let limits = if self.observed.limits_unenforced && m.allow_unenforced_limits {
            policy::Limits::Unenforced
        } else {
            policy::Limits::Enforced
        };
        let held = self.opts.held_until(&m.team, &m.member);
        let news = self
            .observed
            .board_news
            .get(&(m.team.clone(), m.member.clone()));
        let c = Container {
            keep,
            limits,
            held,
            news,
            asked: self.opts.asked(&m.team, &m.member),
        };
        plan_member(m, &c, &self.desired.store, plan);
    }

    /// No container of ours: make one, unless a container ateam (this store) did not make
    /// holds its name (never touched: a conflict).
    fn create(&self, m: &DesiredMember, plan: &mut Plan) {
        let foreign = self
            .observed
            .containers
            .iter()
            .find(|c| c.name == m.spec.name && owned_key(c, &self.desired.store).is_none());
        match foreign {
            Some(c) => plan.findings.push(Finding::Conflict {
                team: m.team.clone(),
                member: m.member.clone(),
                container: cref(c),
                owner: c
                    .labels
                    .get(labels::STORE)
                    .map(|s| format!("ateam store {s}")),
            }),
            None => plan.actions.push(Action::create(m.clone())),
        }
    }
}

/// Only replacements are left: the best takes the member's name if it is up to date and
/// live, and the others go; if none is fit, they all go and a new container is made.
fn finish_replacement(m: &DesiredMember, replacements: &[&ObservedContainer], plan: &mut Plan) {
    let best = pick_keeper(replacements, &m.hash);
    let finishable = spec_drift(m, best).is_none() && best.state.is_live();
    for r in replacements {
        plan.actions.push(if finishable && r.id == best.id {
            let (container, name) = (cref(r), m.spec.name.clone());
            Action::of(m, ContainerOp::FinishReplacement { container, name })
        } else {
            remove_duplicate(m, r)
        });
    }
    if !finishable {
        plan.actions.push(Action::create(m.clone()));
    }
}

fn remove_duplicate(m: &DesiredMember, c: &ObservedContainer) -> Action {
    let (container, removal) = (cref(c), Removal::Duplicate);
    Action::of(m, ContainerOp::Remove { container, removal })
}

/// The member's container kept, and what bears on it.
struct Container<'a> {
    keep: &'a ObservedContainer,
    /// Whether the engine enforces its limits.
    limits: policy::Limits,
    /// Until when the crash-loop policy holds a restart back.
    held: Option<SystemTime>,
    /// What its team's board has for its agent.
    news: Option<&'a crate::board::store::News>,
    /// The person asked for a new one.
    asked: bool,
}

/// The container for one wanted member: up to date and running as its policy says.
fn plan_member(m: &DesiredMember, kept: &Container, store: &str, plan: &mut Plan) {
    let c = kept.keep;
    let recreate = |reason: Drift| {
        let (member, old) = (Box::new(m.clone()), cref(c));
        Action::of(
            m,
            ContainerOp::Recreate {
                member,
                old,
                reason,
            },
        )
    };
    let start = |reason| {
        let container = cref(c);
        Action::of(m, ContainerOp::Start { container, reason })
    };
    if let Some(drift) = spec_drift(m, c) {
        plan.actions.push(recreate(drift));
        return;
    }
    if let Some(eff) = &c.effective {
        let mut violations = policy::verify(&m.spec, eff, kept.limits);
        violations.extend(label_violation(m, c, store));
        if !violations.is_empty() {
            plan.actions.push(recreate(Drift::Policy { violations }));
            return;
        }
    }
    if kept.asked {
        plan.actions.push(recreate(Drift::Asked));
        return;
    }
    if c.name != m.spec.name {
        let (container, name) = (cref(c), m.spec.name.clone());
        plan.actions
            .push(Action::of(m, ContainerOp::RestoreName { container, name }));
    }
    match c.state {
        ContainerState::Running if !c.released => {
            plan.actions.push(start(StartReason::NotReleased));
        }
        ContainerState::Running | ContainerState::Restarting | ContainerState::Removing => {}
        ContainerState::Paused => {
            let container = cref(c);
            plan.actions
                .push(Action::of(m, ContainerOp::Unpause { container }));
        }
        ContainerState::Dead => plan.actions.push(recreate(Drift::Dead)),
        ContainerState::Created => plan.actions.push(start(StartReason::NeverStarted)),
        ContainerState::Exited { code } => plan_exit(m, c, code, kept.held, kept.news, plan),
    }
}

/// An exited member: restarted if its policy says so (or the restart deferred, when the
/// crash-loop policy holds it back), else woken if its board has news for its agent, else
/// finished.
fn plan_exit(
    m: &DesiredMember,
    c: &ObservedContainer,
    code: i64,
    held: Option<SystemTime>,
    news: Option<&crate::board::store::News>,
    plan: &mut Plan,
) {
    let (team, member) = (m.team.clone(), m.member.clone());
    let start = |reason| {
        let container = cref(c);
        Action::of(m, ContainerOp::Start { container, reason })
    };
    let restart = match m.restart {
        RestartPolicy::Never => false,
        RestartPolicy::OnFailure => code != 0,
        RestartPolicy::Always => true,
    };
    match (restart, held) {
        (true, Some(until)) => plan.deferred.push(Deferred {
            team,
            member,
            until,
        }),
        (true, None) => {
            let policy = m.restart;
            plan.actions
                .push(start(StartReason::Restart { code, policy }));
        }
        (false, _) => match news.filter(|n| n.is_new() && m.wake.is_some()) {
            Some(n) => plan.actions.push(start(StartReason::Board {
                messages: n.messages,
                tasks: n.tasks,
                mark: n.mark,
            })),
            None => plan.findings.push(Finding::Finished { team, member, code }),
        },
    }
}

/// The labels ateam set, exactly: each with its value, and no other `ateam.dev/` label but
/// a replacement's `replaces`. (Docker adds the image's own labels; those are not ateam's.)
fn label_violation(m: &DesiredMember, c: &ObservedContainer, store: &str) -> Option<Violation> {
    let want = m.container_labels(store);
    let missing = want.iter().any(|(k, v)| c.labels.get(k) != Some(v));
    let extra: Vec<&String> = c
        .labels
        .keys()
        .filter(|k| k.starts_with("ateam.dev/") && !want.contains_key(*k) && *k != labels::REPLACES)
        .collect();
    (missing || !extra.is_empty()).then(|| Violation {
        item: "labels".into(),
        expected: "the labels ateam set".into(),
        found: if extra.is_empty() {
            "some changed or missing".into()
        } else {
            format!(
                "also {}",
                extra
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            )
        },
    })
}

/// How the container's recorded spec differs from the wanted one, if it does.
fn spec_drift(m: &DesiredMember, c: &ObservedContainer) -> Option<Drift> {
    let old_hash = c.labels.get(labels::SPEC_HASH).cloned().unwrap_or_default();
    if old_hash == m.hash {
        return None;
    }
    let old: Option<Value> = c
        .labels
        .get(labels::SPEC)
        .and_then(|s| serde_json::from_str(s).ok());
    let new = serde_json::to_value(&m.spec).expect("a spec always serializes");
    match old {
        Some(old) => {
            let mut changes = Vec::new();
            diff_values("", &old, &new, &mut changes);
            if changes.is_empty() {
                // Same content under a different hash: the label was edited by hand.
                Some(Drift::SpecHash {
                    from: old_hash,
                    to: m.hash.clone(),
                })
            } else {
                Some(Drift::Spec { changes })
            }
        }
        None => Some(Drift::SpecHash {
            from: old_hash,
            to: m.hash.clone(),
        }),
    }
}

/// Of several containers for one member, keep the one that is most nearly right: current spec
/// first, then live, then newest.
fn pick_keeper<'a>(cs: &[&'a ObservedContainer], hash: &str) -> &'a ObservedContainer {
    cs.iter()
        .copied()
        .max_by_key(|c| {
            (
                c.labels.get(labels::SPEC_HASH).map(String::as_str) == Some(hash),
                c.state.is_live(),
                c.created,
            )
        })
        .expect("called with at least one container")
}
