//! One writer per folder: a member's write grant must not overlap another member's, in any
//! team of the store, unless both members say they share it (`shareWrites`). Two agents that
//! edit one tree unawares undo each other's work. Main sessions run on the host as the person
//! and are not counted; read grants never are.
//!
//! Two folders overlap when one is the other or inside it, judged as grants are
//! (`crate::manifest::reach`): by name; by device and inode of each folder and its ancestors,
//! so that one folder reached by two paths (a bind mount) is one folder; and by the mount
//! table, which also shows a bind mount of a folder inside another's (its ancestors are its
//! own) and a mount below a folder. Each folder looks up each of its ancestors once per way,
//! in hash maps: O(folders × depth), whatever the store holds.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{Build, Parsed};
use crate::host::mounts::{FsPath, Mounts};
use crate::manifest::Problem;
use crate::model;

/// The words every refusal of this rule carries (a helper request's refusal is named by them).
pub(crate) const ONE_WRITER: &str = "one writer per folder";

/// A member with a write grant, as this rule judges it.
#[derive(Debug, Clone)]
pub(super) struct Writer {
    team: String,
    member: String,
    write: Vec<PathBuf>,
    share: bool,
    /// Where its manifest names its grant (`spec.access`), as a problem to fill in; `None`
    /// for a member applied in the store, which has no file in this run.
    at: Option<Problem>,
}

impl Writer {
    /// `m` of `team`, when it writes anywhere.
    pub(super) fn of(team: &str, m: &model::Member, at: Option<Problem>) -> Option<Writer> {
        (!m.access.write.is_empty()).then(|| Writer {
            team: team.to_string(),
            member: m.name.clone(),
            write: m.access.write.clone(),
            share: m.share_writes,
            at,
        })
    }

    /// `team/member`, and where it is.
    fn shown(&self) -> String {
        let place = match &self.at {
            Some(p) => format!("{}:{}", p.file.display(), p.line),
            None => "applied in the store".to_string(),
        };
        format!("`{}/{}` ({place})", self.team, self.member)
    }
}

/// A folder of a writer: indexes into `writers` and its `write`.
type Folder = (usize, usize);

/// How two writers' folders overlap: `inner` is `outer` or inside it (by the names a mount
/// shows, which is which is not said).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Overlap {
    inner: Folder,
    outer: Folder,
    same: bool,
    how: How,
}

/// What says two folders overlap, in the order they are asked.
#[derive(Debug, Clone, PartialEq, Eq)]
enum How {
    /// Their names.
    Names,
    /// Device and inode: `via`, `inner` or one of its ancestors, is `outer` by another name.
    Inode { via: PathBuf },
    /// The mount table: the mount at this place (one holds it, or it is below one) shows a
    /// folder of one file system in or around the other's.
    Mount(PathBuf),
}

/// A folder's device and inode.
type FolderId = (u64, u64);

/// Device and inode of `p`, without following a symlink (the checked paths have none; a link
/// planted since names a file of its own, not where it points).
fn folder_id(p: &Path) -> Option<FolderId> {
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// `id_of(p)`, asked once per path: write folders share most of their ancestors.
fn cached<'p>(
    ids: &mut HashMap<&'p Path, Option<FolderId>>,
    id_of: &impl Fn(&Path) -> Option<FolderId>,
    p: &'p Path,
) -> Option<FolderId> {
    *ids.entry(p).or_insert_with(|| id_of(p))
}

/// Where the kernel keeps `p`: its file system and path there, and those of each mount below
/// it (a bind mount of `p` carries them along); each with the mount's place.
fn places(mounts: &Mounts, p: &Path) -> Vec<(FsPath, PathBuf)> {
    let own = mounts.locate(p).map(|(m, fs)| (fs, m.point.clone()));
    let below = mounts.below(p).map(|m| {
        let fs = FsPath {
            dev: m.dev.clone(),
            path: m.root.clone(),
        };
        (fs, m.point.clone())
    });
    own.into_iter().chain(below).collect()
}

/// Notes the overlap of folder `inner` with `outer` of another writer, unless their pair has
/// one already (an earlier, plainer way found it).
fn note(
    found: &mut BTreeMap<(usize, usize), Overlap>,
    inner: Folder,
    outer: Folder,
    same: bool,
    how: How,
) {
    let (w, o) = (inner.0, outer.0);
    if w != o {
        found.entry((w.min(o), w.max(o))).or_insert(Overlap {
            inner,
            outer,
            same,
            how,
        });
    }
}

/// Each pair of writers (by index, the lower first) with a folder each that overlap, and the
/// first such overlap found: by names, then by device and inode (`id_of`, where a folder
/// exists), then by the mount table.
fn overlaps(
    writers: &[Writer],
    id_of: impl Fn(&Path) -> Option<FolderId>,
    mounts: Option<&Mounts>,
) -> BTreeMap<(usize, usize), Overlap> {
    let folders: Vec<(Folder, &Path)> = writers
        .iter()
        .enumerate()
        .flat_map(|(w, x)| {
            x.write
                .iter()
                .enumerate()
                .map(move |(f, p)| ((w, f), p.as_path()))
        })
        .collect();
    let mut found = BTreeMap::new();
    by_names(&folders, &mut found);
    by_inodes(&folders, id_of, &mut found);
    if let Some(m) = mounts {
        by_mounts(&folders, m, &mut found);
    }
    found
}

/// Folders whose names nest.
fn by_names(folders: &[(Folder, &Path)], found: &mut BTreeMap<(usize, usize), Overlap>) {
    let mut by_name: HashMap<&Path, Vec<Folder>> = HashMap::new();
    for &(f, p) in folders {
        by_name.entry(p).or_default().push(f);
    }
    for &(f, p) in folders {
        for a in p.ancestors() {
            for &o in by_name.get(a).into_iter().flatten() {
                note(found, f, o, a == p, How::Names);
            }
        }
    }
}

/// Folders of which one, or one of its ancestors, is the other by device and inode.
fn by_inodes(
    folders: &[(Folder, &Path)],
    id_of: impl Fn(&Path) -> Option<FolderId>,
    found: &mut BTreeMap<(usize, usize), Overlap>,
) {
    let mut ids: HashMap<&Path, Option<FolderId>> = HashMap::new();
    let mut by_id: HashMap<FolderId, Vec<Folder>> = HashMap::new();
    for &(f, p) in folders {
        if let Some(i) = cached(&mut ids, &id_of, p) {
            by_id.entry(i).or_default().push(f);
        }
    }
    for &(f, p) in folders {
        for a in p.ancestors() {
            let Some(i) = cached(&mut ids, &id_of, a) else {
                continue;
            };
            for &o in by_id.get(&i).into_iter().flatten() {
                note(found, f, o, a == p, How::Inode { via: a.into() });
            }
        }
    }
}

/// Folders whose places in one file system nest, by the mount table (`places`).
fn by_mounts(
    folders: &[(Folder, &Path)],
    mounts: &Mounts,
    found: &mut BTreeMap<(usize, usize), Overlap>,
) {
    let placed: Vec<(Folder, Vec<(FsPath, PathBuf)>)> = folders
        .iter()
        .map(|&(f, p)| (f, places(mounts, p)))
        .collect();
    let mut by_place: HashMap<(&str, &Path), Vec<(Folder, &Path)>> = HashMap::new();
    for (f, ps) in &placed {
        for (fs, point) in ps {
            by_place
                .entry((&fs.dev, &fs.path))
                .or_default()
                .push((*f, point));
        }
    }
    for (f, ps) in &placed {
        for (fs, point) in ps {
            for a in fs.path.ancestors() {
                for &(o, theirs) in by_place.get(&(fs.dev.as_str(), a)).into_iter().flatten() {
                    // The mount that is not the root's is where the other name comes from.
                    let at = if point.as_path() == Path::new("/") {
                        theirs
                    } else {
                        point
                    };
                    note(found, *f, o, a == fs.path, How::Mount(at.into()));
                }
            }
        }
    }
}

/// Where in the run a writer's grant is named, to report each pair at the one read later; a
/// member of the store comes before every file.
fn reading_key(w: &Writer, files: &BTreeMap<&Path, usize>) -> Option<(usize, usize, usize)> {
    let p = w.at.as_ref()?;
    let file = files.get(p.file.as_path()).copied().unwrap_or(usize::MAX);
    Some((file, p.line, p.column))
}

impl Build<'_> {
    /// The writers collected so far (the manifests' members), with those of the store's teams
    /// the manifests do not define again, judged: one problem per overlapping pair not both
    /// sharing, at the member read later. Two members of the store alone are not this run's to
    /// refuse.
    pub(super) fn one_writer_per_folder(&mut self, objects: &[Parsed], redefined: &[&str]) {
        let mut writers = std::mem::take(&mut self.writers);
        for t in self
            .applied
            .iter()
            .filter(|t| !redefined.contains(&&*t.name))
        {
            writers.extend(
                t.members
                    .iter()
                    .filter_map(|m| Writer::of(&t.name, m, None)),
            );
        }
        let mut files: BTreeMap<&Path, usize> = BTreeMap::new();
        for o in objects {
            let next = files.len();
            files.entry(o.src.path.as_path()).or_insert(next);
        }
        for ((a, b), overlap) in overlaps(&writers, folder_id, self.fence.mount_table()) {
            if writers[a].share && writers[b].share {
                continue;
            }
            let (here, other) =
                if reading_key(&writers[a], &files) > reading_key(&writers[b], &files) {
                    (a, b)
                } else {
                    (b, a)
                };
            let Some(at) = &writers[here].at else {
                continue;
            };
            self.problems.push(Problem {
                message: refusal(&writers, here, other, &overlap),
                ..at.clone()
            });
        }
    }
}

/// The words of a refusal at writer `here`, of its overlap `o` with writer `other`.
fn refusal(writers: &[Writer], here: usize, other: usize, o: &Overlap) -> String {
    let path = |(w, f): Folder| writers[w].write[f].display().to_string();
    let (h, x) = (&writers[here], &writers[other]);
    let here_inner = o.inner.0 == here;
    let mine = path(if here_inner { o.inner } else { o.outer });
    let theirs = path(if here_inner { o.outer } else { o.inner });
    let x_shown = x.shown();
    let how = match (&o.how, o.same, here_inner) {
        (How::Names, true, _) => format!("which {x_shown} writes too"),
        (How::Inode { .. }, true, _) => {
            format!("which {x_shown} writes too as `{theirs}` (the same device and inode)")
        }
        (How::Mount(at), ..) => format!(
            "and {x_shown} writes `{theirs}`: the mount at `{}` shows one as the other or inside it",
            at.display()
        ),
        (_, false, true) => format!("inside `{theirs}`, which {x_shown} writes"),
        (_, false, false) => format!("and {x_shown} writes `{theirs}` inside it"),
    };
    let inode = match &o.how {
        How::Inode { via } if !o.same => format!(
            " (`{}` is `{}` by device and inode)",
            via.display(),
            path(o.outer)
        ),
        How::Names | How::Inode { .. } | How::Mount(_) => String::new(),
    };
    let sharing = match (h.share, x.share) {
        (true, false) => format!(" (only `{}/{}` says so)", h.team, h.member),
        (false, true) => format!(" (only `{}/{}` says so)", x.team, x.member),
        _ => String::new(),
    };
    format!(
        "member `{}/{}` writes `{mine}`, {how}{inode}: {ONE_WRITER}; give each member a folder of its own, or set `shareWrites: true` on both{sharing}",
        h.team, h.member
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(member: &str, write: &[&str], share: bool) -> Writer {
        Writer {
            team: "t".into(),
            member: member.into(),
            write: write.iter().map(PathBuf::from).collect(),
            share,
            at: None,
        }
    }

    /// Folders as a bind mount of `/home/u/repo` on `/mnt/repo` shows them: two paths of one
    /// folder, and of each folder inside it. Faked, as a unit test cannot mount.
    fn bound(p: &Path) -> Option<FolderId> {
        const FOLDERS: [&str; 7] = [
            "/",
            "/home",
            "/home/u",
            "/home/u/repo",
            "/home/u/repo/src",
            "/home/u/other",
            "/mnt",
        ];
        let s = p.to_str()?.replacen("/mnt/repo", "/home/u/repo", 1);
        let i = FOLDERS.iter().position(|f| *f == s)?;
        Some((1, i as u64))
    }

    fn refused(ws: &[Writer], here: usize, other: usize) -> String {
        let o = &overlaps(ws, bound, None)[&(here.min(other), here.max(other))];
        refusal(ws, here, other, o)
    }

    #[test]
    fn one_folder_by_two_paths_overlaps_by_device_and_inode() {
        let ws = [
            writer("a", &["/mnt/repo"], false),
            writer("b", &["/home/u/repo/src"], false),
            writer("c", &["/home/u/other"], false),
        ];
        let found = overlaps(&ws, bound, None);
        assert_eq!(found.keys().copied().collect::<Vec<_>>(), vec![(0, 1)]);
        let m = refused(&ws, 1, 0);
        assert!(
            m.starts_with("member `t/b` writes `/home/u/repo/src`, inside `/mnt/repo`, which `t/a` (applied in the store) writes (`/home/u/repo` is `/mnt/repo` by device and inode): one writer per folder;"),
            "{m}"
        );
        let m = refused(&ws, 0, 1);
        assert!(m.contains("writes `/mnt/repo`, and `t/b` (applied in the store) writes `/home/u/repo/src` inside it (`/home/u/repo` is `/mnt/repo` by device and inode)"), "{m}");
        // The same folder; only one of the two shares it.
        let ws = [
            writer("a", &["/home/u/repo"], false),
            writer("b", &["/mnt/repo"], true),
        ];
        let m = refused(&ws, 1, 0);
        assert!(m.contains("writes `/mnt/repo`, which `t/a` (applied in the store) writes too as `/home/u/repo` (the same device and inode)"), "{m}");
        assert!(
            m.ends_with("set `shareWrites: true` on both (only `t/b` says so)"),
            "{m}"
        );
        // Without device and inode (folders that do not exist), the paths alone do not meet.
        assert!(overlaps(&ws, |_| None, None).is_empty());
    }

    /// A bind mount of a folder inside another's shows it by another name, with ancestors of
    /// their own: only the mount table sees it, as it sees a mount below a folder.
    #[test]
    fn a_bind_mount_of_a_folder_inside_anothers_is_seen_in_the_mount_table() {
        let mounts = Mounts::parse(
            "1 0 8:1 / / rw - ext4 /dev/root rw\n\
             2 1 8:1 /home/u/repo/src /mnt/src rw - ext4 /dev/root rw\n\
             3 1 8:1 /home/u/repo/docs /srv/b/docs rw - ext4 /dev/root rw\n\
             4 1 0:99 / /srv/c rw - tmpfs tmpfs rw\n",
        );
        let ws = [
            writer("a", &["/home/u/repo"], false),
            writer("b", &["/mnt/src/x"], false),
            writer("c", &["/srv/b"], false),
            writer("d", &["/srv/c"], false),
            writer("e", &["/home/u/other"], false),
        ];
        let found = overlaps(&ws, |_| None, Some(&mounts));
        assert_eq!(
            found.keys().copied().collect::<Vec<_>>(),
            vec![(0, 1), (0, 2)],
            "{found:#?}"
        );
        let m = refusal(&ws, 1, 0, &found[&(0, 1)]);
        assert!(
            m.starts_with("member `t/b` writes `/mnt/src/x`, and `t/a` (applied in the store) writes `/home/u/repo`: the mount at `/mnt/src` shows one as the other or inside it: one writer per folder;"),
            "{m}"
        );
        let m = refusal(&ws, 2, 0, &found[&(0, 2)]);
        assert!(m.contains("the mount at `/srv/b/docs`"), "{m}");
        // Without the mount table, neither names nor inodes meet.
        assert!(overlaps(&ws, |_| None, None).is_empty());
    }

    #[test]
    fn overlaps_by_path_need_no_folder() {
        let ws = [
            writer("a", &["/r/x", "/s"], false),
            writer("b", &["/r"], false),
            writer("c", &["/s"], false),
            writer("d", &["/rx"], false),
        ];
        let found = overlaps(&ws, |_| None, None);
        assert_eq!(
            found.keys().copied().collect::<Vec<_>>(),
            vec![(0, 1), (0, 2)]
        );
        assert_eq!(
            refused(&ws, 2, 0),
            "member `t/c` writes `/s`, which `t/a` (applied in the store) writes too: one writer per folder; give each member a folder of its own, or set `shareWrites: true` on both"
        );
    }

    #[test]
    fn a_member_with_two_folders_of_its_own_overlaps_no_one() {
        let ws = [
            writer("a", &["/r", "/r/x"], false),
            writer("b", &["/s"], false),
        ];
        assert!(overlaps(&ws, |_| None, None).is_empty());
    }
}
