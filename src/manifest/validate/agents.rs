//! `agent:` on a Member: which agent, its task, and what it expands to
//! (`core::agents::expand`), as a command and an environment the other checks then judge.

use std::path::Path;

use super::{Build, Parsed};
use crate::core::agents::{self, AgentKind, AgentLogin};
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
        team_tools: bool,
    ) -> (Option<raw::MemberSpec>, Option<model::Agent>) {
        let Some(kind) = AgentKind::parse(&a.name) else {
            self.problems.push(o.value_problem(
                "spec.agent.name",
                format!("`{}` is not an agent ateam knows: claude or codex", a.name),
            ));
            return (None, None);
        };
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
        let build = self.agent_build(o, kind, a);
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
            interactive: a.interactive,
            home: Default::default(),
            dir: Some(
                crate::manifest::reach::real_path(&self.host.agents_dir()).join(build.dir_name()),
            ),
            version: Some(build.version),
            sha256: Some(build.sha256),
            login,
            team_tools,
            model_ca: None,
            model_host: None,
        };
        let Some(x) = agent.expand(transcripts, cwd) else {
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

    /// The native build the member gets: the manifest's version and checksum, else the ones
    /// ateam pins. A version ateam does not pin needs its checksum: nothing unchecked runs.
    fn agent_build(&mut self, o: &Parsed, kind: AgentKind, a: &raw::AgentSpec) -> agents::Build {
        let pinned = kind.pinned();
        if let Some(v) = &a.version
            && let Err(e) = agents::check_version(v)
        {
            self.problems.push(o.value_problem("spec.agent.version", e));
        }
        if let Some(s) = &a.sha256
            && !agents::is_sha256(s)
        {
            self.problems.push(o.value_problem(
                "spec.agent.sha256",
                "not a SHA-256: 64 lowercase hex digits, as sha256sum prints them",
            ));
        }
        let version = a.version.clone().unwrap_or(pinned.version.clone());
        let sha256 = match &a.sha256 {
            Some(s) => s.clone(),
            None if version == pinned.version => pinned.sha256,
            None => {
                self.problems.push(o.value_problem(
                    "spec.agent.version",
                    format!(
                        "ateam pins the checksum of {} {} only: give `sha256` of this version's npm tarball too (`npm pack {}` and `sha256sum` of the .tgz it writes)",
                        kind.name(),
                        pinned.version,
                        agents::Build {
                            kind,
                            version: version.clone(),
                            sha256: String::new()
                        }
                        .npm_spec()
                    ),
                ));
                String::new()
            }
        };
        agents::Build {
            kind,
            version,
            sha256,
        }
    }

    /// Adds the model host of the member's agent to its grant (`AccessGrant::add_model_host`):
    /// the modelUrl's host or the vendor's, with the key or login the proxy injects there, and
    /// the `modelCA` it is trusted by. Records in `agent` what it added, for `export`.
    pub(super) fn agent_egress(
        &mut self,
        o: &Parsed,
        a: &raw::AgentSpec,
        agent: &mut model::Agent,
        access: &mut model::AccessGrant,
    ) {
        let Some(kind) = AgentKind::parse(&agent.name) else {
            return;
        };
        let ca = a.model_ca.as_deref().and_then(|ca| {
            crate::manifest::rules::upstream_ca(ca, &o.src.dir, &self.host.home)
                .map_err(|e| self.problems.push(o.value_problem("spec.agent.modelCA", e)))
                .ok()
        });
        agent.model_ca = ca.clone();
        match agents::model_host(kind, agent.model_url.as_deref(), agent.login, ca) {
            Ok(host) => {
                let name = host.host.clone();
                agent.model_host = access.add_model_host(host).then_some(name);
            }
            Err(e) => self
                .problems
                .push(o.value_problem("spec.agent.modelUrl", e)),
        }
    }

    /// The grant a member runs with: its AccessGrant's, with its agent's model host added
    /// (problems with the agent are reported where the member itself is judged). For a
    /// parent member, whose grant a child's must stay within.
    pub(super) fn effective_grant(
        &self,
        o: &Parsed,
        m: &raw::MemberSpec,
        grant: model::AccessGrant,
    ) -> model::AccessGrant {
        let mut grant = grant;
        let Some(a) = &m.agent else { return grant };
        let Some(kind) = AgentKind::parse(&a.name) else {
            return grant;
        };
        let login = a
            .login
            .as_deref()
            .and_then(AgentLogin::parse)
            .unwrap_or_default();
        let ca = a.model_ca.as_deref().and_then(|ca| {
            crate::manifest::rules::upstream_ca(ca, &o.src.dir, &self.host.home).ok()
        });
        if let Ok(host) = agents::model_host(kind, a.model_url.as_deref(), login, ca) {
            grant.add_model_host(host);
        }
        grant
    }
}
