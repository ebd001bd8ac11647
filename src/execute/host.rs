//! What ateam keeps for a member on the host: its transcript folder, its tasks on the team's
//! board.

use std::path::Path;

use super::{ActionError, Executor};
use crate::board::Actor;
use crate::board::store::{Board, BoardError};
use crate::files;
use crate::plan::spec::DesiredMember;
use crate::plan::{Action, HostOp};

impl Executor<'_> {
    /// Carries out a `HostOp`.
    pub(super) fn host(
        &self,
        a: &Action,
        op: &HostOp,
        wanted: Option<&DesiredMember>,
    ) -> Result<(), ActionError> {
        let (team, member) = a.subject();
        match op {
            HostOp::MakeTranscriptDir { path } => self.make_transcript_dir(wanted, member, path),
            HostOp::ReturnTasks { why } => self.return_tasks(team, member, why),
        }
    }

    /// Makes a member's transcript folder. The member's own: it writes its transcript there
    /// as the user it runs as.
    fn make_transcript_dir(
        &self,
        wanted: Option<&DesiredMember>,
        member: &str,
        path: &Path,
    ) -> Result<(), ActionError> {
        let owner = match wanted {
            Some(m) => self.rt.member_owner(m)?,
            None => self.rt.owner,
        };
        files::member_dir(path, self.rt.owner, owner).map_err(|source| ActionError::Io {
            member: member.to_string(),
            path: path.to_path_buf(),
            source,
        })
    }

    /// Returns what `member` held on its team's board to `todo`, saying why.
    fn return_tasks(&self, team: &str, member: &str, why: &str) -> Result<(), ActionError> {
        let who = Actor::Member(member.to_string());
        self.board_change(team, member, |b| b.give_back(&who, why))
    }

    /// A change of `team`'s board made by an action on `subject`.
    pub(super) fn board_change(
        &self,
        team: &str,
        subject: &str,
        change: impl FnOnce(&Board) -> Result<Vec<u64>, BoardError>,
    ) -> Result<(), ActionError> {
        let board = Board::new(&self.rt.state_dir, team, self.rt.owner);
        change(&board).map(|_| ()).map_err(|e| ActionError::Io {
            member: subject.to_string(),
            path: crate::core::layout::team_run_dir(&self.rt.state_dir, team).join("board"),
            source: std::io::Error::other(e.to_string()),
        })
    }
}
