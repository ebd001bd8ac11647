//! Changes to the person's own manifests, made losslessly (`yaml-edit`): what ateam offers
//! to paste keeps their spelling (relative paths, `upstreamCA` files, flow or block style,
//! comments), and only the lines that change differ.

use std::path::PathBuf;
use std::str::FromStr;

use yaml_edit::{Document, Mapping, Sequence, YamlFile};

use super::load::read_sources;

/// The text of the AccessGrant `name` of team `team` as the manifests at `paths` say it now
/// (the comments just before it included), if one of them defines it. `-` (standard input)
/// is never read here.
pub(crate) fn grant_document(paths: &[PathBuf], team: &str, name: &str) -> Option<String> {
    grant_file(paths, team, name).map(|g| g.document)
}

/// Where the AccessGrant `name` of team `team` is defined among the manifests at `paths`: the
/// file (as read: no link left its folder), the whole file's text, and the grant's document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrantFile {
    /// The file, as the walk of the `-f` paths named it.
    pub path: PathBuf,
    /// Its whole text, as read.
    pub text: String,
    /// The grant's document in it (the comments just before it included).
    pub document: String,
}

/// `grant_document`, with the file it is in.
pub(crate) fn grant_file(paths: &[PathBuf], team: &str, name: &str) -> Option<GrantFile> {
    let files: Vec<PathBuf> = paths
        .iter()
        .filter(|p| p.as_os_str() != "-")
        .cloned()
        .collect();
    let (sources, _) = read_sources(&files, &mut std::io::empty());
    let parsed: Vec<(usize, YamlFile)> = sources
        .iter()
        .enumerate()
        .filter_map(|(n, s)| YamlFile::from_str(&s.text).ok().map(|f| (n, f)))
        .collect();
    let objects: Vec<(usize, Object)> = parsed
        .iter()
        .flat_map(|(n, f)| objects(f).into_iter().map(move |o| (*n, o)))
        .collect();
    // A grant that names no team is of the only Team of its manifests.
    let teams: Vec<String> = objects
        .iter()
        .filter(|(_, o)| o.kind == "Team")
        .map(|(_, o)| o.name.clone())
        .collect();
    objects
        .into_iter()
        .find(|(_, o)| {
            o.kind == "AccessGrant"
                && o.name == name
                && match &o.team {
                    Some(t) => t == team,
                    None => teams == [team],
                }
        })
        .map(|(n, o)| GrantFile {
            path: sources[n].path.clone(),
            text: sources[n].text.clone(),
            document: o.text,
        })
}

/// The whole file `text` with `entries` added at the end of the allow list of its
/// AccessGrant `name` (the one `grant_file` found in it), every other byte as it was; `None`
/// when the file defines no such grant with an allow list, or defines it twice.
pub(crate) fn add_allow_entries_in_file(
    text: &str,
    name: &str,
    entries: &[String],
) -> Option<String> {
    edit_grant_in_file(text, name, |spec| {
        let allow = spec.get_mapping("network")?.get_sequence("allow")?;
        for e in entries {
            allow.push(e.as_str());
        }
        Some(())
    })
}

/// The whole file `text` with `entries` added at the end of the `spec.deny` list of its
/// AccessGrant `name` (the list made, in the spec's own style, if it has none), every other
/// byte as it was; `None` as for `add_allow_entries_in_file`.
pub(crate) fn add_deny_entries_in_file(
    text: &str,
    name: &str,
    entries: &[String],
) -> Option<String> {
    edit_grant_in_file(text, name, |spec| {
        spec.get_mapping("network")?.get_sequence("allow")?;
        if let Some(deny) = spec.get_sequence("deny") {
            for e in entries {
                deny.push(e.as_str());
            }
            return Some(());
        }
        let deny = if spec.is_flow_style() {
            Sequence::new_flow()
        } else {
            Sequence::new()
        };
        for e in entries {
            deny.push(e.as_str());
        }
        spec.set("deny", &deny);
        Some(())
    })
}

/// The whole file `text` with the rule `{methods: [method], paths: [path]}` added at the end
/// of the `http` rules of the host with rules `host` in the allow list of its AccessGrant
/// `name` (the list made, in the entry's own style, if it has none); `None` when there is no
/// such host with rules in that grant, or it is written twice.
pub(crate) fn add_http_rule_in_file(
    text: &str,
    name: &str,
    host: &str,
    method: &str,
    path: &str,
) -> Option<String> {
    edit_grant_in_file(text, name, |spec| {
        let allow = spec.get_mapping("network")?.get_sequence("allow")?;
        let mut ruled = allow.values().filter_map(|v| {
            let m = v.as_mapping()?.clone();
            let h = m.get("host")?.as_scalar()?.as_string();
            (h == host).then_some(m)
        });
        let entry = ruled.next()?;
        if ruled.next().is_some() {
            return None;
        }
        let rule = Mapping::new_flow();
        let one = |v: &str| {
            let s = Sequence::new_flow();
            s.push(v);
            s
        };
        rule.set("methods", one(method));
        rule.set("paths", one(path));
        match entry.get_sequence("http") {
            Some(http) => http.push(&rule),
            None => {
                let http = if entry.is_flow_style() {
                    Sequence::new_flow()
                } else {
                    Sequence::new()
                };
                http.push(&rule);
                entry.set("http", &http);
            }
        }
        Some(())
    })
}

/// The whole file `text` with `edit` done to the `spec` of its one AccessGrant `name`.
fn edit_grant_in_file(
    text: &str,
    name: &str,
    edit: impl FnOnce(&Mapping) -> Option<()>,
) -> Option<String> {
    let file = YamlFile::from_str(text).ok()?;
    let mut found = file.documents().filter(|d| {
        d.as_mapping().is_some_and(|m| {
            let field = |m: &Mapping, k: &str| m.get(k).map(|v| v.to_string().trim().to_string());
            field(&m, "kind").as_deref() == Some("AccessGrant")
                && m.get_mapping("metadata")
                    .and_then(|md| field(&md, "name"))
                    .as_deref()
                    == Some(name)
        })
    });
    let doc = found.next()?;
    if found.next().is_some() {
        return None;
    }
    edit(&doc.as_mapping()?.get_mapping("spec")?)?;
    Some(file.to_string())
}

/// A unified diff of `old` to `new` (lines), as `diff -u` prints it with 2 lines of context,
/// for a change that inserts lines or rewrites some: what `approvals --proposal` shows.
pub fn diff(path: &str, old: &str, new: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    // Each line: ' ', '-' or '+', with its line numbers in a and b.
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            (i, j) = (i + 1, j + 1);
        } else if let Some(k) = (j..b.len()).find(|&k| i < a.len() && b[k] == a[i]) {
            ops.extend(b[j..k].iter().map(|l| ('+', *l)));
            j = k;
        } else {
            if i < a.len() {
                ops.push(('-', a[i]));
                i += 1;
            }
            if j < b.len() {
                ops.push(('+', b[j]));
                j += 1;
            }
        }
    }
    let mut out = format!("--- {path}\n+++ {path} (proposed)\n");
    let changed: Vec<usize> = (0..ops.len()).filter(|&n| ops[n].0 != ' ').collect();
    let mut n = 0;
    while n < changed.len() {
        let start = changed[n].saturating_sub(2);
        let mut end = changed[n];
        while n < changed.len() && changed[n] <= end + 4 {
            end = changed[n];
            n += 1;
        }
        let end = (end + 3).min(ops.len());
        let before = |c: char| {
            ops[..start]
                .iter()
                .filter(|o| o.0 == ' ' || o.0 == c)
                .count()
        };
        let count = |c: char| {
            ops[start..end]
                .iter()
                .filter(|o| o.0 == ' ' || o.0 == c)
                .count()
        };
        out.push_str(&format!(
            "@@ -{},{} +{},{} @@\n",
            before('-') + 1,
            count('-'),
            before('+') + 1,
            count('+')
        ));
        for (c, l) in &ops[start..end] {
            out.push_str(&format!("{c}{l}\n"));
        }
    }
    out
}

/// One document of a manifest: its kind, name, `spec.team` and text.
struct Object {
    kind: String,
    name: String,
    team: Option<String>,
    text: String,
}

fn objects(file: &YamlFile) -> Vec<Object> {
    let text = |m: &Mapping, key: &str| m.get(key).map(|v| v.to_string().trim().to_string());
    file.documents()
        .filter_map(|d| {
            let m = d.as_mapping()?;
            let doc = d.to_string();
            Some(Object {
                kind: text(&m, "kind")?,
                name: m.get_mapping("metadata").and_then(|md| text(&md, "name"))?,
                team: m.get_mapping("spec").and_then(|s| text(&s, "team")),
                text: doc.strip_prefix("---\n").unwrap_or(&doc).to_string(),
            })
        })
        .collect()
}

/// `document` (one AccessGrant's) with `entries` added at the end of its
/// `spec.network.allow`, each quoted where YAML needs it; `None` when it has no such list.
pub(crate) fn add_allow_entries(document: &str, entries: &[String]) -> Option<String> {
    let doc = Document::from_str(document).ok()?;
    let allow = doc
        .as_mapping()?
        .get_mapping("spec")?
        .get_mapping("network")?
        .get_sequence("allow")?;
    for e in entries {
        allow.push(e.as_str());
    }
    let text = doc.to_string();
    // One document, ready to paste in place of the old one: no document marker.
    Some(text.strip_prefix("---\n").unwrap_or(&text).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "apiVersion: ateam.dev/v1alpha1
kind: Team
metadata: {name: t}
spec: {image: x}
---
# the coder's grant: keep it narrow
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: g}
spec:
  write: [./repo]   # its checkout
  network:
    allow:
      - example.com  # docs
      - {host: model.example, upstreamCA: ./model-ca.pem}
---
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: flow}
spec: {read: [../docs], network: {allow: [a.example]}}
";

    #[test]
    fn a_grant_is_found_and_widened_as_the_person_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("team.yaml");
        std::fs::write(&file, MANIFEST).unwrap();
        let paths = [dir.path().to_path_buf()];
        assert_eq!(grant_document(&paths, "other", "g"), None, "another team's");
        assert_eq!(grant_document(&paths, "t", "nosuch"), None);
        let g = grant_document(&paths, "t", "g").expect("found in its folder");
        let new = [
            "pypi.org".to_string(),
            "[::1]:8080".into(),
            "*.npmjs.org".into(),
        ];
        let widened = add_allow_entries(&g, &new).unwrap();
        assert_eq!(
            widened,
            "# the coder's grant: keep it narrow
apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: g}
spec:
  write: [./repo]   # its checkout
  network:
    allow:
      - example.com  # docs
      - {host: model.example, upstreamCA: ./model-ca.pem}
      - pypi.org
      - '[::1]:8080'
      - '*.npmjs.org'
"
        );
        let flow = grant_document(&paths, "t", "flow").unwrap();
        assert_eq!(
            add_allow_entries(&flow, &new[..1]).unwrap().trim_end(),
            "apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: flow}
spec: {read: [../docs], network: {allow: [a.example, pypi.org]}}"
        );
        let found = grant_file(&paths, "t", "g").unwrap();
        assert_eq!(found.path, file);
        let whole = add_allow_entries_in_file(&found.text, "g", &new[..1]).unwrap();
        // Only the lines of the allow list change: the rest of the file is byte for byte.
        let at = MANIFEST.find("      - {host: model.example").unwrap();
        let end = at + MANIFEST[at..].find('\n').unwrap() + 1;
        assert_eq!(&whole[..end], &MANIFEST[..end]);
        assert_eq!(&whole[end..end + 17], "      - pypi.org\n");
        assert_eq!(&whole[end + 17..], &MANIFEST[end..]);
        let flow = add_allow_entries_in_file(&found.text, "flow", &new[..1]).unwrap();
        assert!(
            flow.ends_with("spec: {read: [../docs], network: {allow: [a.example, pypi.org]}}\n")
        );
        assert_eq!(add_allow_entries_in_file(&found.text, "nosuch", &new), None);
        // A deny list, made where there is none, then added to; in flow style in a flow spec.
        let denied = add_deny_entries_in_file(&found.text, "g", &new[..1]).unwrap();
        let at = MANIFEST
            .find("---\napiVersion: ateam.dev/v1alpha1\nkind: AccessGrant\nmetadata: {name: flow}")
            .unwrap();
        assert_eq!(
            denied,
            format!(
                "{}  deny:\n    - pypi.org\n{}",
                &MANIFEST[..at],
                &MANIFEST[at..]
            )
        );
        let again = add_deny_entries_in_file(&denied, "g", &new[1..2]).unwrap();
        assert!(
            again.contains("  deny:\n    - pypi.org\n    - '[::1]:8080'\n"),
            "{again}"
        );
        let flow = add_deny_entries_in_file(&found.text, "flow", &new[..1]).unwrap();
        assert!(
            flow.ends_with("network: {allow: [a.example]}, deny: [pypi.org]}\n"),
            "{flow}"
        );
        let none = "kind: AccessGrant\nmetadata: {name: n}\nspec: {network: none}\n";
        assert_eq!(add_http_rule_in_file(none, "n", "x", "GET", "/"), None);
        assert_eq!(add_allow_entries(none, &new), None);
    }

    #[test]
    fn a_rule_is_added_to_a_host_with_rules_and_nothing_else_changes() {
        let text = "apiVersion: ateam.dev/v1alpha1
kind: AccessGrant
metadata: {name: g}
spec:
  network:
    allow:
      - example.com  # a tunnel
      - host: api.example   # the API
        http:
          - {methods: [GET], paths: [/v1/**]}
      - {host: flow.example, upstreamCA: ./ca.pem}
";
        let new = add_http_rule_in_file(text, "g", "api.example", "POST", "/v1/x").unwrap();
        assert_eq!(
            new,
            text.replace(
                "          - {methods: [GET], paths: [/v1/**]}\n",
                "          - {methods: [GET], paths: [/v1/**]}\n          - {methods: [POST], paths: [/v1/x]}\n"
            )
        );
        let flow = add_http_rule_in_file(text, "g", "flow.example", "GET", "/a").unwrap();
        assert_eq!(
            flow,
            text.replace(
                "{host: flow.example, upstreamCA: ./ca.pem}",
                "{host: flow.example, upstreamCA: ./ca.pem, http: [{methods: [GET], paths: [/a]}]}"
            )
        );
        assert_eq!(
            add_http_rule_in_file(text, "g", "example.com", "GET", "/"),
            None
        );
        assert_eq!(add_http_rule_in_file(text, "g", "nosuch", "GET", "/"), None);
    }

    #[test]
    fn a_diff_shows_inserted_and_rewritten_lines_with_their_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let new = "a\nb\nc\nX\nd\ne\nf\ng\nh\nI\nj\n";
        assert_eq!(
            diff("t.yaml", old, new),
            "--- t.yaml\n+++ t.yaml (proposed)\n@@ -2,4 +2,5 @@\n b\n c\n+X\n d\n e\n@@ -7,4 +8,4 @@\n g\n h\n-i\n+I\n j\n"
        );
    }
}
