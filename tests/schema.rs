//! The JSON Schema under `manifests/` is generated; this fails when it is stale.
//! Regenerate with: `cargo run -- schema > manifests/ateam.schema.json`.

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
