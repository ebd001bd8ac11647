//! `ateam schema manifests|status|diff`: the JSON Schemas, generated from the types that
//! read and write these documents, so an editor's and a script's idea of them cannot drift.

use crate::cli::SchemaOf;

use super::exit::Exit;

/// The schemas are generated; `manifests/*.schema.json` are these, checked by tests.
pub fn run(of: SchemaOf) -> anyhow::Result<Exit> {
    let schema = match of {
        SchemaOf::Manifests => ateam::manifest::raw::json_schema(),
        SchemaOf::Status => ateam::report::status_schema(),
        SchemaOf::Diff => ateam::report::diff_schema(),
    };
    outln!("{}", serde_json::to_string_pretty(&schema)?);
    Ok(Exit::Ok)
}
