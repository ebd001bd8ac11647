//! Documents for machines (`-o json|yaml`, docs/output.md): printed here, the one place that
//! knows how. Text is each command's own.

use anyhow::Context;
use serde::Serialize;

/// Prints `doc` on stdout as one YAML document when `yaml`, else as one JSON document.
pub fn print_document<T: Serialize>(doc: &T, yaml: bool) -> anyhow::Result<()> {
    if yaml {
        print!("{}", serde_yaml::to_string(doc).context("rendering YAML")?);
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(doc).context("rendering JSON")?
        );
    }
    Ok(())
}
