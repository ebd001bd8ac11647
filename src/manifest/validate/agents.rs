//! `agent:` on a Member: which agent, its task, and what it expands to
//! (`core::agents::expand`), as a command and an environment the other checks then judge.

use std::path::Path;

use super::{Build, Parsed};
use crate::core::agents::{AgentKind, AgentLogin, expand_agent};
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
        if a.task.trim().is_empty() {
            self.problems.push(o.value_problem(
                "spec.agent.task",
                "the task is empty: say what the agent is to do",
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
        let login = match a.login.as_deref() {
            None => AgentLogin::ApiKey,
            Some(l) => AgentLogin::parse(l).unwrap_or_else(|| {
                self.problems.push(o.value_problem(
                    "spec.agent.login",
                    format!("`{l}` is not a login ateam knows: subscription (the person's Claude or ChatGPT login, `ateam login import`) or apiKey (the default: the key in secretEnv)"),
                ));
                AgentLogin::ApiKey
            }),
        };
        let mut agent = model::Agent {
            name: a.name.clone(),
            task: a.task.clone(),
            model: a.model.clone(),
            model_url: a.model_url.clone(),
            args: a.args.clone(),
            home: Default::default(),
            login,
        };
        let Some(x) = expand_agent(&agent, transcripts) else {
            return (None, None);
        };
        agent.home = x.home.clone();
        let mut spec = m.clone();
        spec.command = Some(x.command);
        let mut env = x.env;
        env.extend(m.env.clone());
        spec.env = env;
        if let Some(secret) = x.secret
            && !spec.secret_env.iter().any(|s| s == secret)
        {
            spec.secret_env.push(secret.to_string());
        }
        (Some(spec), Some(agent))
    }
}
