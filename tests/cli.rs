//! The `ateam` binary as a user runs it: exit codes and what it prints.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ateam(args: &[&str], stdin: Option<&str>) -> Output {
    ateam_with(args, stdin, None)
}

/// `rust_log` is the RUST_LOG the binary sees (none otherwise, whatever the caller's is).
fn ateam_with(args: &[&str], stdin: Option<&str>, rust_log: Option<&str>) -> Output {
    let state = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ateam"));
    match rust_log {
        Some(v) => cmd.env("RUST_LOG", v),
        None => cmd.env_remove("RUST_LOG"),
    };
    let mut child = cmd
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
    let out = ateam(&["validate", "-f", "examples/demo-team/team.yaml"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "valid: 1 team(s), 1 main session(s), 3 member(s), 3 grant(s)"
    );
}

/// The GitOps example's CI script validates its teams with the real binary; without a
/// mode it prints its usage and exits 2.
#[test]
fn the_gitops_ci_script_validates_its_teams() {
    let run = |args: &[&str]| {
        Command::new("bash")
            .arg("examples/gitops/ci.sh")
            .args(args)
            .current_dir(root())
            .env("ATEAM", env!("CARGO_BIN_EXE_ateam"))
            .env("ATEAM_STATE_DIR", tempfile::tempdir().unwrap().path())
            .output()
            .unwrap()
    };
    let out = run(&["validate"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "valid: 2 team(s), 2 main session(s), 3 member(s), 3 grant(s)"
    );
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("ci.sh drift"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn invalid_manifest_exits_3_and_names_file_line_object_field() {
    let out = ateam(
        &["validate", "-f", "tests/broken/12-memory-unit.yaml"],
        None,
    );
    assert_eq!(out.status.code(), Some(3));
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

/// Under each problem, its source line with a caret under the place, as rustc shows them;
/// the caret spans the token (a quoted value with its quotes) and counts characters, not
/// bytes.
#[test]
fn problems_show_their_line_with_a_caret() {
    let out = ateam(
        &["validate", "-f", "tests/broken/12-memory-unit.yaml"],
        None,
    );
    assert_eq!(
        text(&out.stderr),
        "error: tests/broken/12-memory-unit.yaml:19:13: Member/a: spec.resources.memory: `512Q` has an unknown unit `Q` (use Ki, Mi, Gi, Ti, Pi, Ei for powers of 1024, k, M, G, T, P, E for powers of 1000, or none for bytes)
   |
19 |     memory: 512Q
   |             ^^^^
1 problem found; nothing was changed
"
    );
    // Two-byte characters before the second problem's place on the same line.
    let yaml = "apiVersion: ateam.dev/v1alpha1\nkind: Team\nmetadata: {name: t}\nspec: {image: x}\n---\napiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata: {name: g}\nspec: {network: {allow: [\"ünï.example\", \"https://x.example\"]}}\n";
    let out = ateam(&["validate", "-f", "-"], Some(yaml));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "<stdin>:9:41: AccessGrant/g: spec.network.allow[1]: `https://x.example` is a URL; write the host name only, for example `x.example`
  |
9 | spec: {network: {allow: [\"ünï.example\", \"https://x.example\"]}}
  |                                         ^^^^^^^^^^^^^^^^^^^
"
        ),
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
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    // The problems, without the source snippet under each (`  |`, `4 | ...`).
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| {
            !l.starts_with(' ')
                && !l
                    .trim_start_matches(|c: char| c.is_ascii_digit())
                    .starts_with(" |")
        })
        .collect();
    // Objects with fields that did not fit are judged without them: the member's unknown
    // parent is said in the same run as its misshapen fields and the Team's typo.
    assert_eq!(lines.len(), 5, "{err}");
    assert_eq!(
        err.lines().count(),
        5 + 4 * 3,
        "a snippet of three lines under each:\n{err}"
    );
    assert!(lines[0].ends_with("a-team.yaml:4:18: Team/t: spec.maxMembrs: unknown field `maxMembrs` (did you mean `maxMembers`?)"), "{err}");
    assert!(lines[1].ends_with("b-member.yml:5:11: Member/m: spec.parent: parent `nobody` is not a MainSession or Member of this team"), "{err}");
    assert!(lines[2].ends_with("b-member.yml:6:3: Member/m: spec.restart: unknown variant `Sometimes`, expected one of `Never`, `OnFailure`, `Always`"), "{err}");
    assert!(lines[3].ends_with("b-member.yml:7:15: Member/m: spec.resources.pids: invalid type: string \"lots\", expected a whole number"), "{err}");
    assert_eq!(lines[4], "4 problems found; nothing was changed");
}

/// Four mistakes in three files, of both kinds (a field that does not fit, and a rule its
/// value breaks), in one run: none hides another.
#[test]
fn four_errors_in_three_files_are_four_problems() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "team.yaml",
            "apiVersion: ateam.dev/v1alpha1\nkind: Team\nmetadata: {name: t}\nspec: {image: x, imagee: y}\n---\napiVersion: ateam.dev/v1alpha1\nkind: MainSession\nmetadata: {name: lead}\nspec: {command: [sh]}\n",
        ),
        (
            "a.yaml",
            "apiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {name: a}\nspec:\n  parent: nolead\n  restrat: Always\n",
        ),
        (
            "b.yaml",
            "apiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {name: b}\nspec:\n  parent: lead\n  env: {\"1BAD\": x}\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let out = ateam(&["validate", "-f", dir.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    for says in [
        "team.yaml:4:18: Team/t: spec.imagee: unknown field `imagee`",
        "a.yaml:5:11: Member/a: spec.parent: parent `nolead` is not a MainSession or Member of this team",
        "a.yaml:6:3: Member/a: spec.restrat: unknown field `restrat`",
        "b.yaml:6:9: Member/b: spec.env.1BAD: `1BAD` is not a valid environment variable name",
        "4 problems found; nothing was changed",
    ] {
        assert!(err.contains(says), "{says:?} not in:\n{err}");
    }
}

#[test]
fn validate_reads_stdin() {
    let yaml = std::fs::read_to_string(root().join("tests/broken/16-parent-missing.yaml")).unwrap();
    let out = ateam(&["validate", "-f", "-"], Some(&yaml));
    assert_eq!(out.status.code(), Some(3));
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
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("no/such/file.yaml: cannot read:"),
        "{}",
        text(&out.stderr)
    );

    let empty = tempfile::tempdir().unwrap();
    let out = ateam(&["validate", "-f", empty.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(3));
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
    for (cmd, code) in [("apply", 3), ("diff", 3), ("status", 3)] {
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

const VALID: &str = "valid: 1 team(s), 1 main session(s), 3 member(s), 3 grant(s)\n";

/// Every stderr line of a `--log-format json` run, parsed; each must be one JSON object with
/// a level and fields.
fn json_lines(stderr: &[u8]) -> Vec<serde_json::Value> {
    text(stderr)
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert!(v["level"].is_string(), "{l}");
            assert!(v["fields"].is_object(), "{l}");
            v
        })
        .collect()
}

#[test]
fn json_logs_are_json_lines_on_stderr_and_leave_stdout_alone() {
    let out = ateam(
        &[
            "--log-format",
            "json",
            "-v",
            "validate",
            "-f",
            "examples/demo-team/team.yaml",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), VALID);
    let lines = json_lines(&out.stderr);
    // -v is info: the judgment of the manifests, with its numbers in fields.
    let judged = lines
        .iter()
        .find(|l| l["fields"]["message"] == "manifests judged")
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(judged["level"], "INFO");
    assert_eq!(judged["fields"]["files"], 1);
    assert_eq!(judged["fields"]["objects"], 8);
    assert_eq!(judged["fields"]["problems"], 0);
    assert!(judged["fields"]["elapsed_ms"].is_number(), "{judged}");
    assert!(lines.iter().all(|l| l["level"] != "DEBUG"), "{lines:?}");

    // As a global flag it goes after the command too; --show's YAML stays clean.
    let out = ateam(
        &[
            "validate",
            "--show",
            "-f",
            "examples/demo-team/team.yaml",
            "-vv",
            "--log-format=json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    yaml_rust2::YamlLoader::load_from_str(&text(&out.stdout)).unwrap();
    assert!(
        json_lines(&out.stderr)
            .iter()
            .any(|l| l["level"] == "DEBUG")
    );
}

#[test]
fn by_default_and_with_quiet_a_valid_run_logs_nothing() {
    for args in [
        &["validate", "-f", "examples/demo-team/team.yaml"][..],
        &["-q", "validate", "-f", "examples/demo-team/team.yaml"],
        &[
            "--quiet",
            "--log-format",
            "json",
            "validate",
            "-f",
            "examples/demo-team/team.yaml",
        ],
    ] {
        let out = ateam(args, None);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_eq!(text(&out.stdout), VALID, "{args:?}");
        assert_eq!(text(&out.stderr), "", "{args:?}");
    }
    // Quiet hides logs, not the command's own report of problems.
    let out = ateam(
        &["-q", "validate", "-f", "tests/broken/12-memory-unit.yaml"],
        None,
    );
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(
        err.contains("1 problem found; nothing was changed"),
        "{err}"
    );
    assert!(!err.contains("INFO") && !err.contains("WARN"), "{err}");
}

#[test]
fn rust_log_overrides_the_level_flags() {
    // Debug lines although -q asks for errors only.
    let out = ateam_with(
        &["-q", "validate", "-f", "examples/demo-team/team.yaml"],
        None,
        Some("debug"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), VALID);
    let err = text(&out.stderr);
    assert!(
        err.lines().any(|l| l.contains("DEBUG")
            && l.contains("manifest read")
            && l.contains("path=examples/demo-team/team.yaml")),
        "{err}"
    );
    // A directive for another target only: nothing of ateam's.
    let out = ateam_with(
        &["-vvv", "validate", "-f", "examples/demo-team/team.yaml"],
        None,
        Some("bollard=trace"),
    );
    assert_eq!(text(&out.stderr), "");
    // Empty counts as unset.
    let out = ateam_with(
        &["validate", "-f", "examples/demo-team/team.yaml"],
        None,
        Some(""),
    );
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn bad_log_settings_are_usage_errors_exit_2() {
    let out = ateam(
        &[
            "--log-format",
            "xml",
            "validate",
            "-f",
            "examples/demo-team/team.yaml",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "");
    let err = text(&out.stderr);
    assert!(
        err.contains("invalid value 'xml' for '--log-format <FORMAT>'")
            && err.contains("[possible values: text, json]"),
        "{err}"
    );

    let out = ateam(
        &["-q", "-v", "validate", "-f", "examples/demo-team/team.yaml"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot be used with"),
        "{}",
        text(&out.stderr)
    );

    let out = ateam_with(
        &["validate", "-f", "examples/demo-team/team.yaml"],
        None,
        Some("ateam=loud"),
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).starts_with("error: RUST_LOG=\"ateam=loud\" is not a valid filter"),
        "{}",
        text(&out.stderr)
    );
}

/// With nothing applied, `status -o json|yaml` is still a document a parser reads (no
/// teams), not a sentence; the table says so in words.
#[test]
fn status_with_nothing_applied_is_an_empty_document() {
    let out = ateam(&["status", "-o", "json"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["apiVersion"], "ateam.dev/v1alpha1");
    assert_eq!(v["kind"], "Status");
    assert_eq!(v["teams"], serde_json::json!([]));
    assert_eq!(v["drifted"], false);
    let out = ateam(&["status", "-o", "yaml"], None);
    let docs = yaml_rust2::YamlLoader::load_from_str(&text(&out.stdout)).unwrap();
    let y = yaml_to_json(&docs[0]);
    assert_eq!(y["kind"], "Status");
    assert_eq!(y["teams"], serde_json::json!([]));
    let out = ateam(&["status"], None);
    assert!(
        text(&out.stdout).contains("no teams applied"),
        "{}",
        text(&out.stdout)
    );
}

/// A reader that goes away (`ateam schema | head -1`) ends the command as SIGPIPE would: exit
/// 141 and nothing on stderr, not a panic.
#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_ateam"))
        .args(["schema"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(141));
    assert_eq!(text(&out.stderr), "");
}

/// A YAML value as JSON, keeping YAML's own types (a quoted `"0.5"` stays a string).
fn yaml_to_json(y: &yaml_rust2::Yaml) -> serde_json::Value {
    use yaml_rust2::Yaml;
    match y {
        Yaml::String(s) => s.clone().into(),
        Yaml::Integer(i) => (*i).into(),
        Yaml::Real(r) => r.parse::<f64>().unwrap().into(),
        Yaml::Boolean(b) => (*b).into(),
        Yaml::Null => serde_json::Value::Null,
        Yaml::Array(a) => a.iter().map(yaml_to_json).collect(),
        Yaml::Hash(h) => h
            .iter()
            .map(|(k, v)| (k.as_str().unwrap().to_string(), yaml_to_json(v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        other => panic!("unexpected YAML node {other:?}"),
    }
}

/// `validate --show` prints YAML that reads back as the very model ateam built (types
/// included): values that look like numbers, booleans or null stay strings.
#[test]
fn validate_show_yaml_reads_back_as_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().canonicalize().unwrap();
    std::fs::write(
        dir.join("team.yaml"),
        "apiVersion: ateam.dev/v1alpha1\nkind: Team\nmetadata: {name: t}\n\
         spec: {image: 'x:1', sessionDir: ./sessions}\n---\n\
         apiVersion: ateam.dev/v1alpha1\nkind: MainSession\nmetadata: {name: lead}\n\
         spec: {command: [sh, '-c', 'echo: 1']}\n---\n\
         apiVersion: ateam.dev/v1alpha1\nkind: Member\n\
         metadata: {name: m, labels: {a: 'yes', b: 'null', c: '0.5', d: '~', e: '010', f: ''}}\n\
         spec:\n  parent: lead\n  env: {MULTI: \"two\\nlines\", HASH: '# not a comment', COLON: 'a: b'}\n",
    )
    .unwrap();
    // The file, not its folder: the transcripts folder is in it.
    let file = dir.join("team.yaml");
    let out = ateam(&["validate", "--show", "-f", file.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let docs = yaml_rust2::YamlLoader::load_from_str(&text(&out.stdout)).unwrap();
    assert_eq!(docs.len(), 1);
    let shown: ateam::model::Model = serde_json::from_value(yaml_to_json(&docs[0])).unwrap();
    let state = tempfile::tempdir().unwrap();
    let host = ateam::host::Host::detect(Some(state.path().to_path_buf()));
    let built = ateam::app::Manifests::read(&[file])
        .unwrap()
        .validate(&host, &[])
        .unwrap();
    assert_eq!(shown, built);
}

/// An engine the user named that does not answer fails the doctor, on a line that names the
/// socket and says what to do; the other checks still run.
#[test]
fn doctor_fails_on_a_dead_engine_socket_and_says_which() {
    let dir = tempfile::tempdir().unwrap();
    // A socket file nobody listens on any more: connecting is refused.
    let dead = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    for backend in [None, Some("docker")] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ateam"));
        if let Some(b) = backend {
            cmd.args(["--backend", b]);
        }
        let out = cmd
            .arg("doctor")
            .env("ATEAM_STATE_DIR", dir.path().join("state"))
            .env("DOCKER_HOST", format!("unix://{}", dead.display()))
            .env_remove("CONTAINER_HOST")
            .output()
            .unwrap();
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
        let line = stdout
            .lines()
            .position(|l| {
                l.starts_with("FAIL  engine    docker at unix://")
                    && l.contains("dead.sock (DOCKER_HOST): docker is not running")
            })
            .unwrap_or_else(|| panic!("no failing engine line:\n{stdout}"));
        assert!(
            stdout
                .lines()
                .nth(line + 1)
                .unwrap()
                .trim_start()
                .starts_with("fix: start the engine"),
            "{stdout}"
        );
        for check in ["cgroup", "tmux", "memory"] {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.split_whitespace().nth(1) == Some(check)),
                "{check} missing:\n{stdout}"
            );
        }
        assert!(stdout.trim_end().ends_with("warning(s)"), "{stdout}");
    }
}

/// `-o json` is one document with every check, for scripts.
#[test]
fn doctor_json_lists_every_check() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ateam"))
        .args(["doctor", "-o", "json"])
        .env("ATEAM_STATE_DIR", dir.path())
        .env(
            "DOCKER_HOST",
            format!("unix://{}/none.sock", dir.path().display()),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = v["checks"].as_array().unwrap();
    assert!(v["failed"].as_u64().unwrap() >= 1, "{v}");
    let engine = checks
        .iter()
        .find(|c| c["check"] == "engine" && c["status"] == "fail")
        .unwrap();
    assert!(
        engine["message"].as_str().unwrap().contains("none.sock"),
        "{v}"
    );
    assert!(engine["fix"].is_string(), "{v}");
    assert!(checks.iter().any(|c| c["check"] == "memory"), "{v}");
}

/// The bash completion script loads in a real bash, registers itself for `ateam`, and
/// completes a subcommand.
#[test]
fn bash_completion_loads_and_completes_a_subcommand() {
    let out = Command::new("bash")
        .arg("--norc")
        .arg("-c")
        .arg(
            r#"set -e
source <("$ATEAM" completion bash)
complete -p ateam
COMP_WORDS=(ateam doc); COMP_CWORD=1; COMP_LINE="ateam doc"; COMP_POINT=${#COMP_LINE}
"$(complete -p ateam | sed -E 's/.*-F ([^ ]+) .*/\1/')" ateam doc ateam
echo "completions: ${COMPREPLY[*]}"
COMP_WORDS=(ateam completion ''); COMP_CWORD=2; COMP_LINE="ateam completion "; COMP_POINT=${#COMP_LINE}
"$(complete -p ateam | sed -E 's/.*-F ([^ ]+) .*/\1/')" ateam '' completion
echo "shells: ${COMPREPLY[*]}""#,
        )
        .env("ATEAM", env!("CARGO_BIN_EXE_ateam"))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("-F _ateam ateam\n"),
        "registered for ateam: {stdout}"
    );
    assert!(stdout.contains("completions: doctor\n"), "{stdout}");
    let shells = stdout
        .lines()
        .find_map(|l| l.strip_prefix("shells: "))
        .unwrap();
    assert!(
        shells.ends_with("bash elvish fish powershell zsh"),
        "{stdout}"
    );
}

/// zsh and fish scripts are produced too, and the man page is roff that names every command.
#[test]
fn completion_scripts_and_man_pages_are_generated() {
    for (shell, marker) in [("zsh", "#compdef ateam"), ("fish", "complete -c ateam")] {
        let out = ateam(&["completion", shell], None);
        assert_eq!(out.status.code(), Some(0));
        assert!(text(&out.stdout).contains(marker), "{shell}");
    }
    let out = ateam(&["man"], None);
    assert_eq!(out.status.code(), Some(0));
    let page = text(&out.stdout);
    assert!(page.starts_with(".ie \\n(.g .ds Aq"), "{page}");
    assert!(page.contains(".TH ateam 1"), "{page}");
    for cmd in ["apply", "doctor", "completion", "man"] {
        assert!(
            page.contains(&format!("ateam\\-{cmd}(1)")),
            "{cmd}:\n{page}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let out = ateam(&["man", "--dir", dir.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for page in [
        "ateam.1",
        "ateam-apply.1",
        "ateam-doctor.1",
        "ateam-delete.1",
    ] {
        assert!(dir.path().join(page).is_file(), "{page}");
    }
}

/// An allow entry naming loopback by address still validates (it works for a client that
/// uses the proxy), with a warning on stderr that says how to write it from now on.
#[test]
fn validate_says_how_to_write_a_loopback_entry_now() {
    let yaml = "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: t}
spec: {image: ateam-demo:latest}
---
apiVersion: ateam.dev/v1alpha1
kind: MainSession
metadata: {name: lead}
spec: {command: [claude], cwd: tests/broken/fixtures/repo}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: g}
spec: {read: [tests/broken/fixtures/repo], network: {allow: ['127.0.0.1:11434', 'host.ateam.internal:8080']}}
---
apiVersion: ateam.dev/v1alpha1
kind: Member
metadata: {name: a}
spec: {parent: lead, access: g}
";
    let out = ateam(&["validate", "-f", "-"], Some(yaml));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: team t: AccessGrant/g spec.network.allow[0]")
            && err.contains("write `host.ateam.internal:11434`"),
        "{err}"
    );
    assert_eq!(err.matches("warning:").count(), 1, "{err}");
}

/// `controller --metrics` on an address others can reach is a usage error (the figures name
/// teams and members) unless `--metrics-allow-remote`; nothing is started, no lock taken.
#[test]
fn controller_metrics_refuse_a_non_loopback_address() {
    for addr in ["0.0.0.0:9464", "[::]:9464", "192.0.2.1:9464"] {
        let out = ateam(&["controller", "-f", "examples", "--metrics", addr], None);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{addr}: {err}");
        assert!(err.contains("is not a loopback address"), "{addr}: {err}");
        assert!(err.contains("--metrics-allow-remote"), "{addr}: {err}");
        assert!(err.contains("Usage: ateam controller"), "{addr}: {err}");
    }
    let out = ateam(
        &[
            "controller",
            "-f",
            "examples",
            "--metrics",
            "example.com:80",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is not an address and port"));
    // The flag alone means nothing; with --once there is no server to run.
    let out = ateam(
        &["controller", "-f", "examples", "--metrics-allow-remote"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = ateam(
        &[
            "controller",
            "-f",
            "examples",
            "--once",
            "--metrics",
            "127.0.0.1:1",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}
