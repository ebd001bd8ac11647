//! The JSON Schemas under `manifests/` are generated; these fail when one is stale.
//! Regenerate with: `cargo run -- schema > manifests/ateam.schema.json`, and
//! `cargo run -- schema status > manifests/status.schema.json` (and `diff`).

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

#[test]
fn checked_in_schema_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/ateam.schema.json");
    let on_disk = std::fs::read_to_string(&path).expect("manifests/ateam.schema.json exists");
    let current =
        serde_json::to_string_pretty(&ateam::manifest::raw::json_schema()).unwrap() + "\n";
    assert!(
        on_disk == current,
        "{} is stale; run `cargo run -- schema > manifests/ateam.schema.json`",
        path.display()
    );
}

#[test]
fn checked_in_output_schemas_are_current() {
    for (file, current) in [
        ("status", ateam::report::status_schema()),
        ("diff", ateam::report::diff_schema()),
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("manifests/{file}.schema.json"));
        let on_disk = std::fs::read_to_string(&path).expect("the schema is checked in");
        assert!(
            on_disk == serde_json::to_string_pretty(&current).unwrap() + "\n",
            "{} is stale; run `cargo run -- schema {file} > manifests/{file}.schema.json`",
            path.display()
        );
        // Every document says what it is, and every key is always there (null when empty).
        assert_eq!(
            current["properties"]["apiVersion"]["const"],
            "ateam.dev/v1alpha1"
        );
        assert!(current["properties"]["kind"]["const"].is_string());
        assert_eq!(current["additionalProperties"], false, "{file}");
        let required = current["required"].as_array().unwrap().len();
        let props = current["properties"].as_object().unwrap().len();
        assert_eq!(required, props, "{file}: every key is required");
    }
}

#[test]
fn schema_covers_every_kind_and_denies_unknown_fields() {
    let schema = ateam::manifest::raw::json_schema();
    let kinds: Vec<&str> = schema["allOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["if"]["properties"]["kind"]["const"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Team", "MainSession", "AccessGrant", "Member"]);
    for def in [
        "TeamSpec",
        "MainSessionSpec",
        "AccessGrantSpec",
        "MemberSpec",
        "Resources",
        "Metadata",
    ] {
        assert_eq!(schema["$defs"][def]["additionalProperties"], false, "{def}");
    }
}

/// The schema's quantity patterns take exactly what validation takes, so an editor flags
/// `1gb` or `512m` as `ateam validate` does. (Zero fits the patterns; validation refuses it
/// with its own message.)
#[test]
fn quantity_patterns_agree_with_validation() {
    use ateam::core::quantity::{parse_cpus, parse_memory};
    let schema = ateam::manifest::raw::json_schema();
    let pattern = |def: &str| {
        regex::Regex::new(
            schema["$defs"][def]["anyOf"][0]["pattern"]
                .as_str()
                .unwrap(),
        )
        .unwrap()
    };
    let memory = pattern("MemoryQuantity");
    for s in [
        "512Mi", "1.5Gi", "2G", "64k", "1024", "1Ei", "1gb", "1GB", "1g", "512m", "64K", "2GiB",
        "1024B", "1e9", ".5Gi", "1.Gi", "-1G", "Mi", "", "12Qi", "0.5k",
    ] {
        assert_eq!(
            memory.is_match(s),
            parse_memory(s).is_ok(),
            "memory `{s}`: pattern and validation disagree"
        );
    }
    let cpus = pattern("CpuQuantity");
    for s in [
        "1.5", "2", "500m", "0.25", "two", "1e3", "500M", "1.5.2", "-1", "",
    ] {
        assert_eq!(
            cpus.is_match(s),
            parse_cpus(s).is_ok(),
            "cpus `{s}`: pattern and validation disagree"
        );
    }
}
