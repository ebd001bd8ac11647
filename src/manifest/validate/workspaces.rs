//! Writers' workspaces: the person's repository they are made from, its base and the
//! member's branch; and that no member can write the `.git` a workspace is made from.

use std::path::{Path, PathBuf};

use super::{Build, Parsed, Problem};
use crate::core::layout::workspace_dir;
use crate::manifest::paths::{check_dir, resolve, within};
use crate::manifest::raw;
use crate::model::{self, Workspace};

/// A workspace as judged, kept until every team is built: no write grant of any member may
/// reach the `.git` it is made from. `place` is where its `repo` is written.
pub(super) struct Made {
    git_dir: PathBuf,
    who: String,
    place: Problem,
}

impl Build<'_> {
    /// The member's workspace, when it asks for one: `repo` a repository's top folder with a
    /// `.git` folder of its own, `base` a branch, tag or commit id of it, `branch` a valid
    /// branch name.
    pub(super) fn member_workspace(
        &mut self,
        team: &str,
        session_dir: &Path,
        name: &str,
        o: &Parsed,
        spec: &raw::WorkspaceSpec,
    ) -> Option<Workspace> {
        let field = "spec.workspace.repo";
        let repo = resolve(&spec.repo, &o.src.dir, &self.host.home);
        let mut ok = true;
        if let Err(e) = check_dir(&repo) {
            self.problems.push(o.value_problem(field, e));
            ok = false;
        }
        let git_dir = repo.join(".git");
        let objects = git_dir.join("objects");
        if ok && let Err(e) = repository(&git_dir) {
            self.problems
                .push(o.value_problem(field, format!("`{}` {e}", repo.display())));
            ok = false;
        }
        let base = spec.base.clone().unwrap_or_else(|| "HEAD".into());
        if ok && !names_commit(&git_dir, &base) {
            self.problems.push(o.value_problem(
                "spec.workspace.base",
                format!(
                    "`{base}` names no branch, tag or full commit id of {}",
                    repo.display()
                ),
            ));
        }
        let branch = spec
            .branch
            .clone()
            .unwrap_or_else(|| format!("ateam/{team}/{name}"));
        if let Err(e) = branch_name(&branch) {
            self.problems
                .push(o.value_problem("spec.workspace.branch", format!("`{branch}` {e}")));
        }
        self.workspaces.push(Made {
            git_dir: git_dir.clone(),
            who: format!("{team}/{name}"),
            place: o.value_problem(field, String::new()),
        });
        Some(Workspace {
            repo,
            git_dir,
            objects,
            base,
            branch,
            path: workspace_dir(session_dir, name),
        })
    }
}

impl Build<'_> {
    /// The bound of the member's copy snapshots (`snapshotWrites`), which needs write grants
    /// to copy.
    pub(super) fn member_snapshot_writes(
        &mut self,
        o: &Parsed,
        m: &raw::MemberSpec,
        access: &model::AccessGrant,
    ) -> Option<u64> {
        let q = m.snapshot_writes.as_ref()?;
        let field = "spec.snapshotWrites";
        match crate::core::quantity::parse_memory(&super::limits::quantity_text(q)) {
            Ok(_) if access.write.is_empty() => {
                self.problems.push(o.value_problem(
                    field,
                    "the member has no write grant to copy (a workspace is snapshotted anyway)",
                ));
                None
            }
            Ok(b) => Some(b),
            Err(e) => {
                self.problems.push(o.value_problem(field, e));
                None
            }
        }
    }
}

/// The problems of workspaces whose `.git` some member's write grant reaches: that member
/// could plant hooks and config the person's own git runs, and rewrite every branch.
pub(super) fn writable_repositories(
    made: Vec<Made>,
    teams: &[&model::Team],
    problems: &mut Vec<Problem>,
) {
    for m in made {
        let writer = teams.iter().find_map(|t| {
            t.members.iter().find_map(|w| {
                w.access
                    .write
                    .iter()
                    .find(|g| within(&m.git_dir, g) || within(g, &m.git_dir))
                    .map(|g| (format!("{}/{}", t.name, w.name), g))
            })
        });
        if let Some((who, grant)) = writer {
            problems.push(Problem {
                message: format!(
                    "the workspace of {} is made from {}, which member {who} may write (grant {}): a member must never write the person's .git; grant it a workspace instead",
                    m.who,
                    m.git_dir.display(),
                    grant.display()
                ),
                ..m.place
            });
        }
    }
}

/// Whether `git_dir` is a repository ateam can make a workspace from: a `.git` folder (not
/// a worktree's or submodule's `.git` file), its objects with no alternates of their own.
fn repository(git_dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(git_dir)
        .map_err(|_| "is not a git repository (no .git folder in it)".to_string())?;
    if !meta.is_dir() {
        return Err(
            "has a .git that is not a folder (a worktree or a submodule): name the main repository"
                .into(),
        );
    }
    if !git_dir.join("objects").is_dir() || !git_dir.join("HEAD").is_file() {
        return Err("is not a git repository (its .git has no objects or HEAD)".into());
    }
    if git_dir.join("objects/info/alternates").exists() {
        return Err(
            "borrows objects from another repository (objects/info/alternates): not supported"
                .into(),
        );
    }
    Ok(())
}

/// Whether `base` names a commit as git would find it: `HEAD`, a full object id, a branch, a
/// tag or a remote-tracking branch, read from the refs as files (no git runs here).
fn names_commit(git_dir: &Path, base: &str) -> bool {
    if base == "HEAD" {
        return crate::workspace::refs_head_exists(git_dir);
    }
    if (base.len() == 40 || base.len() == 64) && base.bytes().all(|b| b.is_ascii_hexdigit()) {
        return true;
    }
    if branch_name(base).is_err() && !base.starts_with("refs/") {
        return false;
    }
    ["", "refs/heads/", "refs/tags/", "refs/remotes/"]
        .iter()
        .any(|p| crate::workspace::ref_exists(git_dir, &format!("{p}{base}")))
}

/// git's rules for a branch name (`git check-ref-format --branch`), those that matter here.
pub fn branch_name(b: &str) -> Result<(), &'static str> {
    let bad = b.is_empty()
        || b.starts_with('-')
        || b.starts_with('/')
        || b.ends_with('/')
        || b.ends_with('.')
        || b.ends_with(".lock")
        || b.contains("..")
        || b.contains("//")
        || b.contains("@{")
        || b == "@"
        || b.split('/')
            .any(|p| p.starts_with('.') || p.ends_with(".lock"))
        || b.chars()
            .any(|c| c.is_control() || " ~^:?*[\\\u{7f}".contains(c));
    if bad {
        Err("is not a valid branch name (git check-ref-format)")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names_follow_git() {
        for ok in ["ateam/t/m", "fix-1", "a.b/c"] {
            assert!(branch_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "-x", "a..b", "a/.b", "a.lock", "a b", "a~1", "x@{1}", "a//b", "a/",
        ] {
            assert!(branch_name(bad).is_err(), "{bad:?}");
        }
    }
}
