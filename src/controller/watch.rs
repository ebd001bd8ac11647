//! Watching the manifests: any change under the paths given (a file saved, added, removed or
//! renamed) calls back once per event; the queue's debounce makes an editor's burst of writes
//! one reload. The watch is on the folders that hold the paths, so that an editor replacing a
//! file (write to a temp file, rename over) is seen too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};

/// Keeps watching while it lives.
#[must_use = "the watch stops when this is dropped"]
pub struct ManifestWatch {
    _watcher: RecommendedWatcher,
}

/// Calls `changed` whenever something under `paths` may have changed.
pub fn watch(
    paths: &[PathBuf],
    changed: impl Fn() + Send + 'static,
) -> Result<ManifestWatch, notify::Error> {
    let targets = targets(paths);
    let named: BTreeSet<PathBuf> = targets.iter().map(|(p, _)| p.clone()).collect();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        match event {
            Ok(e) if e.kind.is_access() => {}
            // Only manifests matter (a folder of them may also hold transcripts or state).
            Ok(e) if !e.paths.iter().any(|p| is_manifest(p) || named.contains(p)) => {}
            // An error from the watch itself: reload anyway, the resync covers the rest.
            Ok(_) | Err(_) => changed(),
        }
    })?;
    for (dir, mode) in &targets {
        watcher.watch(dir, *mode)?;
    }
    Ok(ManifestWatch { _watcher: watcher })
}

fn is_manifest(p: &Path) -> bool {
    matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

/// What to watch for each path: a folder recursively; a file through its folder (not
/// recursively), since editors replace files rather than write them in place.
fn targets(paths: &[PathBuf]) -> BTreeSet<(PathBuf, RecursiveMode)> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    paths
        .iter()
        .filter(|p| p.as_os_str() != "-")
        .map(|p| {
            let abs = cwd.join(p);
            if abs.is_dir() {
                (abs, RecursiveMode::Recursive)
            } else {
                let dir = abs.parent().map_or_else(|| cwd.clone(), Path::to_path_buf);
                (dir, RecursiveMode::NonRecursive)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    fn wait_for(count: &AtomicUsize, more_than: usize) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if count.load(Ordering::SeqCst) > more_than {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn an_edit_a_new_file_and_a_removed_file_are_each_seen() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("team.yaml");
        std::fs::write(&file, "a").unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        let _w = watch(&[t.path().to_path_buf()], move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        std::fs::write(&file, "b").unwrap();
        assert!(wait_for(&count, 0), "an edit");
        let n = count.load(Ordering::SeqCst);
        std::fs::write(t.path().join("more.yaml"), "c").unwrap();
        assert!(wait_for(&count, n), "a new file");
        let n = count.load(Ordering::SeqCst);
        std::fs::remove_file(&file).unwrap();
        assert!(wait_for(&count, n), "a removed file");
    }

    #[test]
    fn other_files_beside_the_manifests_are_not_a_change() {
        let t = tempfile::tempdir().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        let _w = watch(&[t.path().to_path_buf()], move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        std::fs::create_dir(t.path().join("state")).unwrap();
        std::fs::write(t.path().join("state/controller.json"), "{}").unwrap();
        std::fs::write(t.path().join("transcript.log"), "x").unwrap();
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(count.load(Ordering::SeqCst), 0);
        std::fs::write(t.path().join("team.yml"), "a").unwrap();
        assert!(wait_for(&count, 0));
    }

    #[test]
    fn a_file_replaced_by_rename_is_seen() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("team.yaml");
        std::fs::write(&file, "a").unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        let _w = watch(std::slice::from_ref(&file), move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        let tmp = t.path().join(".team.yaml.swp");
        std::fs::write(&tmp, "b").unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        assert!(wait_for(&count, 0));
    }
}
