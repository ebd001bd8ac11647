//! The `ateam` binary as a user runs it: exit codes and what it prints.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ateam(args: &[&str], stdin: Option<&str>) -> Output {
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ateam"))
        .args(args)
        .current_dir(root())
        .env("ATEAM_STATE_DIR", state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.unwrap_or("").as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn validate_examples_passes() {
    let out = ateam(&["validate", "-f", "examples/"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "valid: 1 team(s), 1 main session(s), 3 member(s), 3 grant(s)"
    );
}

#[test]
fn invalid_manifest_exits_1_and_names_file_line_object_field() {
    let out = ateam(
        &["validate", "-f", "tests/broken/12-memory-unit.yaml"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("tests/broken/12-memory-unit.yaml:19:13: Member/a: spec.resources.memory: `512Q` has an unknown unit"),
        "{err}"
    );
    assert!(
        err.contains("1 problem found; nothing was changed"),
        "{err}"
    );
}

#[test]
fn every_problem_of_a_run_is_reported_across_files_and_within_one_object() {
    let dir = tempfile::tempdir().unwrap();
    let team = "apiVersion: ateam.dev/v1alpha1\nkind: Team\nmetadata: {name: t}\nspec: {image: x, maxMembrs: 2}\n";
    let member = "apiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {name: m}\nspec:\n  parent: nobody\n  restart: Sometimes\n  resources: {pids: lots}\n";
    std::fs::write(dir.path().join("a-team.yaml"), team).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/b-member.yml"), member).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a manifest").unwrap();
    let out = ateam(&["validate", "-f", dir.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert!(lines[0].ends_with("a-team.yaml:4:18: Team/t: spec.maxMembrs: unknown field `maxMembrs` (did you mean `maxMembers`?)"), "{err}");
    assert!(lines[1].ends_with("b-member.yml:6:3: Member/m: spec.restart: unknown variant `Sometimes`, expected one of `Never`, `OnFailure`, `Always`"), "{err}");
    assert!(lines[2].ends_with("b-member.yml:7:15: Member/m: spec.resources.pids: invalid type: string \"lots\", expected a whole number"), "{err}");
    assert_eq!(lines[3], "3 problems found; nothing was changed");
}

#[test]
fn validate_reads_stdin() {
    let yaml = std::fs::read_to_string(root().join("tests/broken/16-parent-missing.yaml")).unwrap();
    let out = ateam(&["validate", "-f", "-"], Some(&yaml));
    assert_eq!(out.status.code(), Some(1));
    // Relative paths in stdin manifests resolve from the working directory, like kubectl.
    assert!(
        text(&out.stderr).contains("<stdin>:17:11: Member/a: spec.parent: parent `leed`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn missing_files_and_empty_folders_are_clear_errors() {
    let out = ateam(&["validate", "-f", "no/such/file.yaml"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no/such/file.yaml: cannot read:"),
        "{}",
        text(&out.stderr)
    );

    let empty = tempfile::tempdir().unwrap();
    let out = ateam(&["validate", "-f", empty.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no manifests (*.yaml, *.yml) found"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn schema_command_prints_the_checked_in_schema() {
    let out = ateam(&["schema"], None);
    assert_eq!(out.status.code(), Some(0));
    let on_disk =
        std::fs::read_to_string(Path::new(&root()).join("manifests/ateam.schema.json")).unwrap();
    assert_eq!(text(&out.stdout), on_disk);
}

#[test]
fn apply_and_diff_with_bad_manifests_touch_nothing() {
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().join("state");
    for (cmd, code) in [("apply", 1), ("diff", 2)] {
        let out = Command::new(env!("CARGO_BIN_EXE_ateam"))
            .args([cmd, "-f", "tests/broken/17-access-missing.yaml"])
            .current_dir(root())
            .env("ATEAM_STATE_DIR", &state_dir)
            // No engine is reachable here: validation must fail before any is looked for.
            .env("DOCKER_HOST", "unix:///nonexistent.sock")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{cmd}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("spec.access: AccessGrant `repo-reed` is not defined"),
            "{}",
            text(&out.stderr)
        );
        assert!(!state_dir.exists(), "{cmd} created the state folder");
    }
}
