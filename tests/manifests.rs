//! Manifest validation as a user meets it: every file under `tests/broken/` holds one mistake
//! people make, and its header says the exact error the user must see:
//!
//! ```text
//! # mistake: what the user did wrong
//! # error: LINE:COLUMN OBJECT FIELD: text the message must contain
//! ```
//! (`-` for no object or no field; `$DIR` stands for this folder). The problem must be reported at that place, and it must be
//! the only one unless `# problems: N` says otherwise.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ateam::host::Host;
use ateam::manifest::{Problem, read_sources, validate};

fn broken_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken")
}

/// A host whose home is inside the fixtures, with 8 GiB of memory. Its state folder is a fixed
/// path outside the checkout (it need not exist): socket paths under it are checked against the
/// 107-byte limit of a Unix socket path, and whether a fixture passes must not depend on how
/// long the path of the checkout is.
fn test_host() -> Host {
    Host {
        uid: 1000,
        gid: 1000,
        state_dir: STATE_DIR.into(),
        home: broken_dir().join("fixtures/home"),
        memory_bytes: 8 << 30,
    }
}

const STATE_DIR: &str = "/nonexistent-state/ateam";

fn problems_of(path: &Path, host: &Host) -> Vec<Problem> {
    let (sources, mut problems) = read_sources(&[path.to_path_buf()], &mut std::io::empty());
    if let Err(mut p) = validate(&sources, host) {
        problems.append(&mut p);
    }
    problems
}

struct Expect {
    line: usize,
    column: usize,
    object: Option<String>,
    field: Option<String>,
    text: String,
    count: usize,
}

fn expectation(text: &str) -> Option<Expect> {
    let header = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
    };
    let error = header("# error:")?;
    let (place, text) = error.split_once(": ")?;
    let mut parts = place.split_whitespace();
    let (line, column) = parts.next()?.split_once(':')?;
    let opt = |s: Option<&str>| s.filter(|s| *s != "-").map(str::to_string);
    Some(Expect {
        line: line.parse().ok()?,
        column: column.parse().ok()?,
        object: opt(parts.next()),
        field: opt(parts.next()),
        text: text.replace("$DIR", &broken_dir().display().to_string()),
        count: header("# problems:").map_or(1, |n| n.parse().expect("# problems: N")),
    })
}

#[test]
fn each_broken_manifest_fails_with_its_own_message() {
    let host = test_host();
    let mut files: Vec<PathBuf> = std::fs::read_dir(broken_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 25,
        "the issue asks for at least 25 distinct mistakes, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    let mut messages = BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let problems = problems_of(file, &host);
        let shown: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        let Some(want) = expectation(&text) else {
            failures.push(format!(
                "{}: no `# error:` header; it reports:\n  {}",
                file.display(),
                shown.join("\n  ")
            ));
            continue;
        };
        let found = problems.iter().find(|p| {
            p.line == want.line
                && p.column == want.column
                && p.object == want.object
                && p.field == want.field
                && p.message.contains(&want.text)
                && p.file == *file
        });
        if found.is_none() || problems.len() != want.count {
            failures.push(format!(
                "{}: expected {} problem(s), one at {}:{} {:?} {:?} containing {:?}; got:\n  {}",
                file.display(),
                want.count,
                want.line,
                want.column,
                want.object,
                want.field,
                want.text,
                shown.join("\n  ")
            ));
        }
        if !messages.insert(want.text.clone()) {
            failures.push(format!(
                "{}: the message {:?} is not distinct",
                file.display(),
                want.text
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_example_team_is_valid() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut host = test_host();
    host.home = "/nonexistent-home".into();
    host.state_dir = "/nonexistent-home/.local/state/ateam".into();
    let (sources, problems) = read_sources(&[examples], &mut std::io::empty());
    assert!(problems.is_empty(), "{problems:?}");
    let desired = validate(&sources, &host).unwrap_or_else(|p| panic!("{p:#?}"));
    let team = &desired.teams[0];
    let names: Vec<&str> = team.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["reviewer", "tester", "writer"]);
    let tester = team.members.iter().find(|m| m.name == "tester").unwrap();
    assert_eq!(tester.depth, 2, "the tester is nested under the writer");
    let reviewer = team.members.iter().find(|m| m.name == "reviewer").unwrap();
    assert!(reviewer.access.write.is_empty());
    assert_eq!(reviewer.memory_bytes, 512 << 20);
    assert_eq!(reviewer.nano_cpus, Some(500_000_000));
}
