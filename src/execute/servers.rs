//! The processes ateam runs on the host beside a member's container: its egress proxy (with
//! the certificates and secrets of its intercepts) and its helper server.

use super::{ActionError, Executor, blocking};
use crate::core::intercept::EgressPolicy;
use crate::files;
use crate::plan::spec::DesiredMember;
use crate::plan::{Action, ServerOp};
use crate::runtime::ProxyStarting;
use crate::servers::egress;
use crate::servers::helper as helpers;

impl Executor<'_> {
    /// Carries out a `ServerOp`.
    pub(super) async fn server(
        &self,
        a: &Action,
        op: &ServerOp,
        wanted: Option<&DesiredMember>,
    ) -> Result<(), ActionError> {
        let (team, member) = a.subject();
        match op {
            ServerOp::StartEgress { policy, .. } => {
                self.start_egress_proxy(wanted, team, member, policy).await
            }
            ServerOp::UpdateEgress { policy } => {
                self.update_egress_policy(wanted, team, member, policy)
            }
            ServerOp::StopEgress => self.stop_egress_proxy(team, member).await,
            ServerOp::StartHelper => self.start_helper_server(wanted, team, member).await,
            ServerOp::StopHelper => self.stop_helper_server(team, member).await,
        }
    }

    /// Starts a member's egress proxy, as the member's user, once the certificates and
    /// secrets its policy names are in place.
    async fn start_egress_proxy(
        &self,
        wanted: Option<&DesiredMember>,
        team: &str,
        member: &str,
        policy: &EgressPolicy,
    ) -> Result<(), ActionError> {
        self.begin_egress_proxy(wanted, team, member, policy)?
            .await
            .map_err(|source| ActionError::Egress {
                member: member.to_string(),
                source,
            })
    }

    /// `start_egress_proxy` for a member whose container is made next: its files are written
    /// now (the team's CA among them, before the container's CA files are), and the proxy is
    /// started on the blocking pool while the container is made; the create waits for it
    /// before the release (`Runtime::launch_with`).
    pub(super) fn begin_egress_proxy(
        &self,
        wanted: Option<&DesiredMember>,
        team: &str,
        member: &str,
        policy: &EgressPolicy,
    ) -> Result<ProxyStarting, ActionError> {
        let (owner, paths, policy) = self.egress_files(wanted, team, member, policy)?;
        let store_owner = self.rt.owner;
        let socket = paths.socket.clone();
        let task =
            tokio::task::spawn_blocking(move || egress::start(&paths, &policy, store_owner, owner));
        Ok(Box::pin(async move {
            task.await.unwrap_or_else(|e| {
                Err(egress::ProxyError::Io {
                    path: socket,
                    source: std::io::Error::other(e),
                })
            })
        }))
    }

    /// Gives a running egress proxy the member's new allowlist (its intercepts first).
    fn update_egress_policy(
        &self,
        wanted: Option<&DesiredMember>,
        team: &str,
        member: &str,
        policy: &EgressPolicy,
    ) -> Result<(), ActionError> {
        let (owner, paths, policy) = self.egress_files(wanted, team, member, policy)?;
        egress::write_policy(&paths, &policy, owner).map_err(|source| ActionError::Io {
            member: member.to_string(),
            path: paths.policy.clone(),
            source,
        })
    }

    /// Stops a member's egress proxy and removes its intercepts: no certificate or secret
    /// value outlives the proxy that needed it.
    async fn stop_egress_proxy(&self, team: &str, member: &str) -> Result<(), ActionError> {
        let paths = egress::Paths::new(&self.rt.state_dir, team, member);
        let pid = paths.pid.clone();
        blocking(member, move || {
            egress::stop(&paths).and_then(|()| files::remove_if_present(&paths.intercept))
        })
        .await?
        .map_err(|source| ActionError::Io {
            member: member.to_string(),
            path: pid,
            source,
        })
    }

    /// Starts a member's helper server, as the member's user.
    async fn start_helper_server(
        &self,
        wanted: Option<&DesiredMember>,
        team: &str,
        member: &str,
    ) -> Result<(), ActionError> {
        let owner = self.member_of(wanted, member)?;
        let (state_dir, store_owner) = (self.rt.state_dir.clone(), self.rt.owner);
        let (t, m) = (team.to_string(), member.to_string());
        blocking(member, move || {
            helpers::start(&state_dir, &t, &m, store_owner, owner)
        })
        .await?
        .map_err(|source| ActionError::Helpers {
            member: member.to_string(),
            source,
        })
    }

    /// Stops a member's helper server.
    async fn stop_helper_server(&self, team: &str, member: &str) -> Result<(), ActionError> {
        let paths = helpers::Paths::new(&self.rt.state_dir, team, member);
        let pid = paths.pid.clone();
        blocking(member, move || helpers::stop(&paths))
            .await?
            .map_err(|source| ActionError::Io {
                member: member.to_string(),
                path: pid,
                source,
            })
    }

    /// The certificates and secrets of a member's intercepted hosts, before its proxy reads
    /// a policy that names them.
    fn write_intercepts(
        &self,
        wanted: Option<&DesiredMember>,
        paths: &egress::Paths,
        policy: &EgressPolicy,
        member_owner: files::Owner,
    ) -> Result<(), ActionError> {
        let Some(m) = wanted else { return Ok(()) };
        let cx = egress::InterceptContext {
            state_dir: &self.rt.state_dir,
            team: &m.team,
            ctl_dir: &m.ctl_dir,
            store_owner: self.rt.owner,
            member: member_owner,
            secret: self.secret,
        };
        egress::write_intercepts(paths, policy, &cx).map_err(|source| ActionError::Egress {
            member: m.member.clone(),
            source,
        })
    }

    /// What a proxy starts from or reloads: the member's user, its paths, its intercepts
    /// written, and its policy file.
    fn egress_files(
        &self,
        wanted: Option<&DesiredMember>,
        team: &str,
        member: &str,
        policy: &EgressPolicy,
    ) -> Result<(files::Owner, egress::Paths, egress::PolicyFile), ActionError> {
        let owner = self.member_of(wanted, member)?;
        let paths = egress::Paths::new(&self.rt.state_dir, team, member);
        self.write_intercepts(wanted, &paths, policy, owner)?;
        Ok((owner, paths, egress::PolicyFile::new(team, member, policy)))
    }

    /// The user a wanted member runs as (its proxy runs as that user too).
    fn member_of(
        &self,
        wanted: Option<&DesiredMember>,
        member: &str,
    ) -> Result<files::Owner, ActionError> {
        let m = wanted.ok_or_else(|| ActionError::Session {
            session: member.to_string(),
            message: "an egress proxy was planned for a member no manifest wants".into(),
        })?;
        Ok(self.rt.member_owner(m)?)
    }
}
