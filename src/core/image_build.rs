//! A member's image as its repository defines it (`image: {devcontainer: ...}` or `image:
//! {build: ...}`): what a `devcontainer.json` says (JSON with comments), which images a
//! Dockerfile builds from, and the tag a build gets. Pure: validation reads the files, the
//! executor builds (`runtime::build`).
//!
//! The tag is named after a hash of everything the build reads (the context's files, the
//! Dockerfile's path, the arguments, the target): an unchanged definition has the same tag,
//! which the engine has already, and is not built again; a changed one has a new tag, which
//! the planner sees as a changed image.

use std::collections::BTreeMap;

/// The repository of the images ateam builds; the tag is the hash.
pub const BUILD_REPOSITORY: &str = "ateam-build";

/// How many hex digits of the hash the tag carries (80 bits: no two definitions meet).
const TAG_DIGITS: usize = 20;

/// The tag of the build whose inputs hash to `hash` (lowercase hex).
pub fn tag(hash: &str) -> String {
    format!(
        "{BUILD_REPOSITORY}:{}",
        hash.get(..TAG_DIGITS).unwrap_or(hash)
    )
}

/// What ateam reads of a `devcontainer.json`: an image by name, or a Dockerfile to build.
/// The rest (features, mounts, run arguments, lifecycle commands) is the editor's business
/// or widens a container, and is not taken.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Devcontainer {
    pub image: Option<String>,
    /// `build.dockerfile` (or the older top-level `dockerFile`), relative to the file.
    pub dockerfile: Option<String>,
    /// `build.context` (or the older top-level `context`), relative to the file; default `.`.
    pub context: Option<String>,
    /// `build.args`.
    pub args: BTreeMap<String, String>,
    /// `build.target`.
    pub target: Option<String>,
}

/// Reads a `devcontainer.json`, which may hold `//` and `/* */` comments and trailing
/// commas. Errs, naming the field, on what ateam cannot build: neither `image` nor a
/// Dockerfile, both, `features` (fetched from a registry), a field of the wrong type.
pub fn parse_devcontainer(text: &str) -> Result<Devcontainer, String> {
    let plain = strip_jsonc(text);
    let v: serde_json::Value =
        serde_json::from_str(&plain).map_err(|e| format!("is not JSON (with comments): {e}"))?;
    let obj = v.as_object().ok_or("is not a JSON object")?;
    let string = |o: &serde_json::Map<String, serde_json::Value>, k: &str, at: &str| match o.get(k)
    {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{at}` is not a string")),
    };
    if obj
        .get("features")
        .is_some_and(|f| f.as_object().is_some_and(|m| !m.is_empty()))
    {
        return Err("`features` are fetched from an image registry, which ateam does not reach: put what they add in the Dockerfile".into());
    }
    let mut d = Devcontainer {
        image: string(obj, "image", "image")?,
        dockerfile: string(obj, "dockerFile", "dockerFile")?,
        context: string(obj, "context", "context")?,
        ..Default::default()
    };
    if let Some(b) = obj.get("build") {
        let b = b.as_object().ok_or("`build` is not an object")?;
        if let Some(f) = string(b, "dockerfile", "build.dockerfile")? {
            d.dockerfile = Some(f);
        }
        if let Some(c) = string(b, "context", "build.context")? {
            d.context = Some(c);
        }
        d.target = string(b, "target", "build.target")?;
        if let Some(args) = b.get("args") {
            let args = args.as_object().ok_or("`build.args` is not an object")?;
            for (k, v) in args {
                let v = v
                    .as_str()
                    .ok_or_else(|| format!("`build.args.{k}` is not a string"))?;
                d.args.insert(k.clone(), v.to_string());
            }
        }
    }
    match (&d.image, &d.dockerfile) {
        (None, None) => {
            Err("names neither `image` nor `build.dockerfile`: nothing to run or build".into())
        }
        (Some(_), Some(_)) => Err("names both `image` and `build.dockerfile`: say one".into()),
        _ => Ok(d),
    }
}

/// `text` with JSONC's comments and trailing commas taken out (strings left as they are),
/// as plain JSON.
fn strip_jsonc(text: &str) -> String {
    let b = text.as_bytes();
    // First the comments (a block comment becomes a blank), then the trailing commas.
    let mut plain: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    let mut in_string = false;
    while i < b.len() {
        let c = b[i];
        if in_string {
            plain.push(c);
            if c == b'\\' && i + 1 < b.len() {
                plain.push(b[i + 1]);
                i += 1;
            } else if c == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        match (c, b.get(i + 1)) {
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
                plain.push(b' ');
            }
            _ => {
                in_string = c == b'"';
                plain.push(c);
                i += 1;
            }
        }
    }
    let mut out: Vec<u8> = Vec::with_capacity(plain.len());
    let mut in_string = false;
    let mut escaped = false;
    for (i, &c) in plain.iter().enumerate() {
        if in_string {
            in_string = escaped || c != b'"';
            escaped = !escaped && c == b'\\';
        } else if c == b'"' {
            in_string = true;
        } else if c == b',' {
            let next = plain[i + 1..].iter().find(|b| !b.is_ascii_whitespace());
            if matches!(next, Some(b'}' | b']')) {
                continue;
            }
        }
        out.push(c);
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The images a Dockerfile builds from (each `FROM` that is not an earlier stage or
/// `scratch`), with `ARG`s before the first `FROM` and the build's `args` filled in. Errs on a
/// `FROM` ateam cannot read, or one whose variables it cannot fill.
pub fn bases(dockerfile: &str, args: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut stages: Vec<String> = Vec::new();
    let mut out: Vec<String> = Vec::new();
    let mut seen_from = false;
    for (n, line) in instructions(dockerfile) {
        let mut words = line.split_whitespace();
        let Some(op) = words.next() else { continue };
        match op.to_ascii_uppercase().as_str() {
            "ARG" if !seen_from => {
                for w in words {
                    let (k, v) = w.split_once('=').unwrap_or((w, ""));
                    let v = args.get(k).cloned().unwrap_or_else(|| unquote(v));
                    vars.insert(k.to_string(), v);
                }
            }
            "FROM" => {
                seen_from = true;
                let rest: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
                let (image, name) = match rest.as_slice() {
                    [image] => (image, None),
                    [image, as_, name] if as_.eq_ignore_ascii_case("as") => (image, Some(name)),
                    _ => {
                        return Err(format!(
                            "line {n}: `FROM` takes an image and an optional `AS name`"
                        ));
                    }
                };
                let image = substitute(image, &vars)
                    .map_err(|v| format!("line {n}: `FROM {image}` uses `{v}`, which no ARG before the first FROM and no build argument sets"))?;
                let earlier = stages.contains(&image.to_ascii_lowercase());
                if !earlier && image != "scratch" && !out.contains(&image) {
                    out.push(image);
                }
                stages.extend(name.map(|n| n.to_ascii_lowercase()));
            }
            _ => {}
        }
    }
    if !seen_from {
        return Err("has no `FROM`".into());
    }
    Ok(out)
}

/// The Dockerfile's instructions with their first line's number: comments and blank lines
/// out, `\` continuations joined.
fn instructions(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if current.is_none() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        let (n, mut acc) = current.take().unwrap_or((i + 1, String::new()));
        if let Some(head) = line.strip_suffix('\\') {
            acc.push_str(head);
            acc.push(' ');
            current = Some((n, acc));
        } else {
            acc.push_str(line);
            out.push((n, acc));
        }
    }
    out.extend(current);
    out
}

fn unquote(v: &str) -> String {
    v.trim_matches(|c| c == '"' || c == '\'').to_string()
}

/// `$NAME`, `${NAME}` and `${NAME:-default}` in `s` filled from `vars`; errs with the first
/// variable that is not there.
fn substitute(s: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, default, len) = if let Some(inner) = after.strip_prefix('{') {
            let end = inner.find('}').ok_or_else(|| format!("${after}"))?;
            let body = &inner[..end];
            let (name, default) = match body.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (body, None),
            };
            (name, default, end + 2)
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], None, end)
        };
        match (vars.get(name).filter(|v| !v.is_empty()), default) {
            (Some(v), _) => out.push_str(v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => return Err(format!("${name}")),
        }
        rest = &after[len..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_devcontainer_json_with_comments_names_its_dockerfile_or_image() {
        let d = parse_devcontainer(
            r#"{
  // the project's dev image
  "name": "app", /* a "quoted // thing" */
  "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "3",},},
  "customizations": {"vscode": {"extensions": ["a//b"]}},
}"#,
        )
        .unwrap();
        assert_eq!(d.dockerfile.as_deref(), Some("Dockerfile"));
        assert_eq!(d.context.as_deref(), Some(".."));
        assert_eq!(d.args["V"], "3");
        let old = parse_devcontainer(r#"{"dockerFile": "x/Dockerfile"}"#).unwrap();
        assert_eq!(old.dockerfile.as_deref(), Some("x/Dockerfile"));
        let img = parse_devcontainer(r#"{"image": "ateam-toolchain:bookworm"}"#).unwrap();
        assert_eq!(img.image.as_deref(), Some("ateam-toolchain:bookworm"));
        for (bad, says) in [
            ("{}", "neither"),
            (r#"{"image": "a", "build": {"dockerfile": "D"}}"#, "both"),
            (
                r#"{"image": "a", "features": {"ghcr.io/x": {}}}"#,
                "registry",
            ),
            (r#"{"build": {"dockerfile": 3}}"#, "build.dockerfile"),
            (
                r#"{"build": {"dockerfile": "D", "args": {"A": 1}}}"#,
                "build.args.A",
            ),
            ("[1]", "object"),
            ("{\"image\": ", "JSON"),
        ] {
            let e = parse_devcontainer(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_bases_of_a_dockerfile_leave_out_its_own_stages() {
        let args = BTreeMap::from([("TAG".to_string(), "bookworm".to_string())]);
        let df = "# syntax\nARG TAG=old\nARG BASE=ateam-toolchain\nFROM --platform=linux/amd64 ${BASE}:$TAG AS build\nRUN make \\\n  all\nFROM build AS test\nFROM scratch\nfrom ${OTHER:-busybox:1} as x\nCOPY --from=build /a /a\n";
        assert_eq!(
            bases(df, &args).unwrap(),
            ["ateam-toolchain:bookworm", "busybox:1"]
        );
        assert!(bases("RUN x", &args).unwrap_err().contains("no `FROM`"));
        let e = bases("FROM img:$NOPE\n", &args).unwrap_err();
        assert!(e.contains("line 1") && e.contains("$NOPE"), "{e}");
        assert!(bases("FROM a b c d\n", &args).is_err());
        assert_eq!(
            tag("0123456789abcdef0123456789abcdef"),
            "ateam-build:0123456789abcdef0123"
        );
    }
}
