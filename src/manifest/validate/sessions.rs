//! Main sessions: each on its own, then against the team's members (a member promoted to a
//! session) and the team's other sessions (a session taking over one that is removed).

use std::path::PathBuf;

use super::{Build, Parsed, TeamObjects, check_env_name, check_socket_path};
use crate::core::layout::{session_socket_path, session_transcript_dir};
use crate::manifest::paths::{check_dir, resolve};
use crate::manifest::raw;
use crate::model;

impl Build<'_> {
    /// The team's main sessions, in reading order.
    pub(super) fn sessions(&mut self, t: &TeamObjects) -> Vec<model::MainSession> {
        let mut sessions: Vec<model::MainSession> = Vec::new();
        for (o, s) in &t.sessions {
            let cwd = self.session_alone(t, o, s);
            self.promotion(t, o, s);
            self.takeover(t, o, s, &sessions);
            sessions.push(model::MainSession {
                name: o.name.clone(),
                cwd,
                command: s.command.clone(),
                env: s.env.clone(),
                labels: o.labels.clone(),
                transcript_dir: session_transcript_dir(&t.session_dir, &o.name),
                promoted_from: s.promoted_from.clone(),
                takes_over: s.takes_over.clone(),
            });
        }
        sessions
    }

    /// What a session needs of its own: a folder to run in (its cwd, returned), a program, a
    /// tmux socket path that fits, environment names it may set, and a name that is not the
    /// members' folder.
    fn session_alone(&mut self, t: &TeamObjects, o: &Parsed, s: &raw::MainSessionSpec) -> PathBuf {
        let problems = &mut *self.problems;
        let cwd = s
            .cwd
            .as_deref()
            .map(|c| resolve(c, &o.src.dir, &self.host.home))
            .unwrap_or_else(|| o.src.dir.clone());
        if let Err(e) = check_dir(&cwd) {
            problems.push(o.value_problem("spec.cwd", e));
        }
        if s.command.is_empty() || s.command[0].trim().is_empty() {
            problems.push(o.problem(
                "spec.command",
                "the command must name a program, for example [claude]",
            ));
        }
        let socket = session_socket_path(&self.host.state_dir, &t.team.name, &o.name);
        if let Err(e) = check_socket_path("tmux", &socket) {
            problems.push(o.problem("metadata.name", e));
        }
        for k in s.env.keys() {
            if let Err(e) = check_env_name(k) {
                problems.push(o.problem(&format!("spec.env.{k}"), e));
            }
        }
        if o.name == "members" {
            problems.push(o.value_problem(
                "metadata.name",
                "`members` is the folder of the members' transcripts in the sessionDir; name the main session otherwise",
            ));
        }
        if o.name == "snapshots" {
            problems.push(o.value_problem(
                "metadata.name",
                "`snapshots` is the folder of the members' copy snapshots in the sessionDir; name the main session otherwise",
            ));
        }
        if o.name == "workspaces" {
            problems.push(o.value_problem(
                "metadata.name",
                "`workspaces` is the folder of the writers' repositories in the sessionDir; name the main session otherwise",
            ));
        }
        cwd
    }

    /// A member promoted to a main session keeps its name and says so (`promotedFrom`): it
    /// leaves its container for the host and your full access, so it must not happen by a
    /// rename alone; and its Member must go.
    fn promotion(&mut self, t: &TeamObjects, o: &Parsed, s: &raw::MainSessionSpec) {
        let member_named = |n: &str| t.members.contains_key(n);
        let was_member = self
            .applied
            .iter()
            .find(|a| a.name == t.team.name)
            .is_some_and(|a| a.members.iter().any(|m| m.name == o.name));
        let problems = &mut *self.problems;
        match &s.promoted_from {
            Some(from) if *from != o.name => problems.push(o.value_problem(
                "spec.promotedFrom",
                format!(
                    "a promoted member keeps its name: `promotedFrom` must be `{}` (the session's own name), not `{from}`",
                    o.name
                ),
            )),
            Some(from) if member_named(from) => problems.push(o.value_problem(
                "spec.promotedFrom",
                format!(
                    "Member `{from}` is still in the manifests: a promoted member becomes this MainSession, so remove its Member"
                ),
            )),
            Some(_) => {}
            None if was_member && !member_named(&o.name) => problems.push(o.problem(
                "metadata.name",
                format!(
                    "`{}` was a Member of team `{}`: turning it into a MainSession moves its transcript and runs it on the host with your full access; say so with `promotedFrom: {}`",
                    o.name, t.team.name, o.name
                ),
            )),
            None => {}
        }
    }

    /// A session takes over (`takesOver`) one removed in the same change, and only one
    /// session takes over each; `earlier` are the team's sessions read before this one.
    fn takeover(
        &mut self,
        t: &TeamObjects,
        o: &Parsed,
        s: &raw::MainSessionSpec,
        earlier: &[model::MainSession],
    ) {
        let Some(old) = &s.takes_over else {
            return;
        };
        let session_named = |n: &str| t.sessions.iter().any(|(x, _)| x.name == n);
        if session_named(old) {
            self.problems.push(o.value_problem(
                "spec.takesOver",
                format!(
                    "MainSession `{old}` is still in the manifests: a session takes over one that is removed in the same change"
                ),
            ));
        } else if let Some(other) = earlier
            .iter()
            .find(|x| x.takes_over.as_deref() == Some(old.as_str()))
        {
            self.problems.push(o.value_problem(
                "spec.takesOver",
                format!("MainSession `{}` takes over `{old}` already", other.name),
            ));
        }
    }
}
