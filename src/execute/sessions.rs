//! Main sessions: a person's terminals on the host, started, stopped, promoted from a member,
//! rolled back; what they held on the team's board handed over.

use std::path::Path;

use super::{ActionError, Executor, blocking, session_step};
use crate::board::Actor;
use crate::plan::spec::DesiredSession;
use crate::plan::{Action, ContainerRef, Promotion, ResumeEntry, SessionOp};
use crate::sessions;

impl Executor<'_> {
    /// Carries out a `SessionOp`.
    pub(super) async fn session(&self, a: &Action, op: &SessionOp) -> Result<(), ActionError> {
        let (team, name) = a.subject();
        match op {
            SessionOp::Start { session, resume } => self.start_session(session, resume).await,
            SessionOp::Promote {
                session,
                containers,
                journal,
                resume,
            } => {
                self.promote(session, containers, journal.as_deref(), resume)
                    .await?;
                // The member's work is the session's now.
                let (from, to) = (
                    Actor::Member(name.to_string()),
                    Actor::Main(name.to_string()),
                );
                self.board_change(team, name, |b| {
                    b.hand_over(&from, &to, "promoted to a main session")
                })
            }
            SessionOp::Stop {
                socket,
                taken_over_by,
            } => {
                self.stop_session(name, socket).await?;
                // What it held goes to its heir, or back to todo.
                let me = Actor::Main(name.to_string());
                self.board_change(team, name, |b| match taken_over_by {
                    Some(heir) => b.hand_over(
                        &me,
                        &Actor::Main(heir.clone()),
                        &format!("main session {name} was taken over by {heir}"),
                    ),
                    None => b.give_back(&me, &format!("main session {name} stopped")),
                })
            }
            SessionOp::RollBack { journal } => self.roll_back(journal),
        }
    }

    /// Starts a main session's terminal on the host.
    async fn start_session(
        &self,
        session: &DesiredSession,
        resume: &[ResumeEntry],
    ) -> Result<(), ActionError> {
        let (s, resume, owner) = (session.clone(), resume.to_vec(), self.rt.owner);
        blocking(&session.name, move || sessions::start(&s, owner, &resume))
            .await?
            .map_err(|source| session_step(&session.name, source))
    }

    /// Turns a member into a main session, step by step (`sessions::promote`).
    async fn promote(
        &self,
        session: &DesiredSession,
        containers: &[ContainerRef],
        journal: Option<&Promotion>,
        resume: &[ResumeEntry],
    ) -> Result<(), ActionError> {
        sessions::promote(self.rt, session, containers, journal, resume)
            .await
            .map_err(|source| session_step(&session.name, source))
    }

    /// Ends a main session's terminal that no manifest wants.
    async fn stop_session(&self, session: &str, socket: &Path) -> Result<(), ActionError> {
        let socket = socket.to_path_buf();
        blocking(session, move || sessions::stop(&socket))
            .await?
            .map_err(|source| session_step(session, source))
    }

    /// Undoes an interrupted promotion that no manifest asks for any more.
    fn roll_back(&self, journal: &Promotion) -> Result<(), ActionError> {
        sessions::roll_back(self.rt, journal).map_err(|source| session_step(&journal.name, source))
    }
}
