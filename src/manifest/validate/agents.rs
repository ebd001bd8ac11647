//! `agent:` on a Member: which agent, its task, and what it expands to
//! (`core::agents::expand`), as a command and an environment the other checks then judge.

use std::path::Path;

use super::{Build, Parsed};
use crate::core::agents::{AgentKind, expand_agent};
use crate::manifest::raw;
use crate::model;

impl Build<'_> {
    /// The member's spec with its agent expanded (the manifest's `env` winning over the
    /// agent's, its key added to `secretEnv`), and the agent's state folder; `None`s when the
    /// agent cannot be judged (its problems are reported).
    pub(super) fn member_agent(
        &mut self,
        o: &Parsed,
        m: &raw::MemberSpec,
        a: &raw::AgentSpec,
        transcripts: &Path,
        cwd: &Path,
    ) -> (Option<raw::MemberSpec>, Option<model::Agent>) {
        if AgentKind::parse(&a.name).is_none() {
            self.problems.push(o.value_problem(
                "spec.agent.name",
                format!("`{}` is not an agent ateam knows: claude or codex", a.name),
            ));
            return (None, None);
        }
        if m.command.is_some() {
            self.problems.push(o.problem(
                "spec.command",
                "a member with `agent` has its command made by ateam: leave `command` out (add flags with agent.args)",
            ));
            return (None, None);
        }
        if a.task.trim().is_empty() && !a.interactive {
            self.problems.push(o.value_problem(
                "spec.agent.task",
                "the task is empty: say what the agent is to do (only an interactive agent may start without one)",
            ));
        }
        if let Some(u) = &a.model_url
            && !(u.starts_with("https://") || u.starts_with("http://"))
        {
            self.problems.push(o.value_problem(
                "spec.agent.modelUrl",
                "the model's base URL must start with https:// (or http://)",
            ));
        }
        let mut agent = model::Agent {
            name: a.name.clone(),
            task: a.task.clone(),
            model: a.model.clone(),
            model_url: a.model_url.clone(),
            args: a.args.clone(),
            interactive: a.interactive,
            home: Default::default(),
        };
        let Some(x) = expand_agent(&agent, transcripts, cwd) else {
            return (None, None);
        };
        agent.home = x.home.clone();
        let mut spec = m.clone();
        spec.command = Some(x.command);
        let mut env = x.env;
        env.extend(m.env.clone());
        spec.env = env;
        if !spec.secret_env.iter().any(|s| s == x.secret) {
            spec.secret_env.push(x.secret.to_string());
        }
        (Some(spec), Some(agent))
    }
}
