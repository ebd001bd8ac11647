//! Documents for machines (`-o json|yaml`, docs/output.md): printed here, the one place that
//! knows how. Text is each command's own.
//!
//! YAML is the JSON document read by yaml-rust2 (JSON is YAML; key order is kept) and written
//! by its emitter, which quotes every string a YAML 1.1 reader would take for something else:
//! times (`"2024-05-01T12:00:00Z"`, a timestamp to PyYAML when bare), `yes`/`no`/`on`/`off`,
//! numbers. So each reader gets the same strings, and there are no tags.

use anyhow::Context;
use serde::Serialize;
use yaml_rust2::{YamlEmitter, YamlLoader};

/// Writes to stdout; when the reader has gone (a closed pipe), exits with 141, what a shell
/// reports for a command ended by SIGPIPE.
pub fn write_stdout(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    ended_if_failed(out.write_fmt(args).and_then(|()| out.flush()));
}

/// `write_stdout` for bytes as they come (`logs -f`).
pub fn write_stdout_bytes(bytes: &[u8]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    ended_if_failed(out.write_all(bytes).and_then(|()| out.flush()));
}

fn ended_if_failed(written: std::io::Result<()>) {
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        eprintln!("error: writing the output: {e}");
        std::process::exit(2);
    }
}

/// Prints `doc` on stdout as one YAML document when `yaml`, else as one JSON document.
pub fn print_document<T: Serialize>(doc: &T, yaml: bool) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(doc).context("rendering JSON")?;
    if yaml {
        outln!("{}", to_yaml(&json)?);
    } else {
        outln!("{json}");
    }
    Ok(())
}

fn to_yaml(json: &str) -> anyhow::Result<String> {
    let docs = YamlLoader::load_from_str(json).context("reading the document as YAML")?;
    let doc = docs.first().context("an empty document")?;
    let mut out = String::new();
    YamlEmitter::new(&mut out)
        .dump(doc)
        .context("rendering YAML")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_quotes_what_a_yaml_1_1_reader_would_retype() {
        let json = r#"{"at": "2024-05-01T12:00:00Z", "name": "on", "count": 3, "ok": true, "none": null, "list": [], "map": {}}"#;
        let y = to_yaml(json).unwrap();
        assert!(y.contains(r#"at: "2024-05-01T12:00:00Z""#), "{y}");
        assert!(y.contains(r#"name: "on""#), "{y}");
        assert!(y.contains("count: 3\n") && y.contains("ok: true\n"), "{y}");
        assert!(y.contains("none: ~") || y.contains("none: null"), "{y}");
        assert!(!y.contains('!'), "no tags: {y}");
        // The order of the keys is the document's.
        assert!(y.find("at:") < y.find("name:") && y.find("name:") < y.find("list:"));
    }
}
