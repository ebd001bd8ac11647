//! The environment variables ateam owns in a member: the ones it sets, which a manifest may
//! not set (validation refuses them, the planner sets them).

use crate::core::container::MEMBER_HOME;
use crate::core::layout::{CA_BUNDLE_NAME, CA_CERT_NAME};

/// The proxy variables ateam sets in a member with an allow list.
pub const PROXY_VARS: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// The variables by which the common clients find the CA of intercepted hosts, set in a
/// member whose allow list has hosts with rules (ateam's in any member with an allow list).
/// Each names the bundle (the image's roots, then the team's CA), but Node's, which adds to
/// Node's own roots and so names the CA alone.
pub const CA_VARS: [(&str, &str); 8] = [
    ("SSL_CERT_FILE", CA_BUNDLE_NAME),
    ("CURL_CA_BUNDLE", CA_BUNDLE_NAME),
    ("REQUESTS_CA_BUNDLE", CA_BUNDLE_NAME),
    ("GIT_SSL_CAINFO", CA_BUNDLE_NAME),
    ("PIP_CERT", CA_BUNDLE_NAME),
    ("AWS_CA_BUNDLE", CA_BUNDLE_NAME),
    ("CODEX_CA_CERTIFICATE", CA_BUNDLE_NAME),
    ("NODE_EXTRA_CA_CERTS", CA_CERT_NAME),
];

/// Why `name` is ateam's in a member's environment, if it is (`proxied`: the member has an
/// allow list, so the proxy and CA variables are ateam's too). `Member.env` and `secretEnv`
/// may not name it: ateam would overwrite it, and a member whose `HOME` or `NO_PROXY` is not
/// what its manifest says is a member nobody can reason about. Every variable
/// `plan::spec::member_spec` sets is here (a unit test holds it so).
pub fn reserved_env(name: &str, proxied: bool) -> Option<String> {
    if name == "HOME" {
        return Some(format!(
            "`HOME` is ateam's: it is always {MEMBER_HOME}, a private tmpfs (point the program's own variable, such as CLAUDE_CONFIG_DIR or CODEX_HOME, elsewhere instead)"
        ));
    }
    if name.starts_with("ATEAM_") {
        return Some(format!(
            "`{name}`: variables named ATEAM_* are ateam's (they tell the member who and where it is)"
        ));
    }
    if proxied && PROXY_VARS.contains(&name) {
        return Some(format!(
            "`{name}` is ateam's in a member with an allow list: it points every client at the member's egress proxy (to reach a service on the host, allow `host.ateam.internal:PORT`)"
        ));
    }
    if proxied && CA_VARS.iter().any(|(v, _)| *v == name) {
        return Some(format!(
            "`{name}` is ateam's in a member with an allow list: it makes clients trust the CA of the hosts the proxy intercepts (hosts with rules)"
        ));
    }
    None
}
