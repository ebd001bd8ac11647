//! The CA of a team's intercepted egress and the certificates it issues (rcgen: no
//! certificate code of ours). One CA per team: a member trusts its own team's CA only, and
//! two teams never share one. Its key stays in the team's `egress-ca` folder (0700, the store
//! owner's): neither a member nor a proxy can read it. ateam issues, at apply, one leaf per
//! intercepted host (the hosts are known: an intercepted entry is never a wildcard), and only
//! those leaves reach the proxy; a proxy taken over by its member can mint nothing.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};

use super::Leaf;
use crate::core::egress::{Entry, Target};
use crate::core::layout::{self, TEAM_CA_CERT_NAME, TEAM_CA_KEY_NAME};
use crate::files::{self, Owner};

/// How long a team's CA is valid: rotated by `ateam egress rotate-ca`, not by the calendar.
const CA_DAYS: i64 = 3650;
/// How long a leaf is valid; every apply that writes a proxy's certificates issues new ones.
const LEAF_DAYS: i64 = 825;
/// Longest CA file ateam reads back.
const MAX_PEM: u64 = 64 * 1024;

/// Why a team's CA could not be made, loaded or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// Making the CA's folder or writing one of its files failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    #[error("the team's egress CA in {} is unusable ({why}); `ateam egress rotate-ca` makes a new one", .dir.display())]
    /// The CA's files are missing, unreadable, or do not parse as a CA and its key.
    BadCa {
        /// The team's `egress-ca` folder.
        dir: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    #[error("cannot issue a certificate for `{host}`: {why}")]
    /// No certificate could be made: the CA itself, or a leaf for an entry that is not one
    /// host (a wildcard, a bad name).
    Issue {
        /// The entry as written, or `the CA of team <t>`.
        host: String,
        /// Why, from the entry's parse or from rcgen.
        why: String,
    },
}

/// A team's CA, loaded.
pub struct TeamCa {
    /// The CA's certificate, PEM: what members trust. Its key never leaves this struct.
    pub cert_pem: String,
    key: KeyPair,
}

impl std::fmt::Debug for TeamCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamCa")
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

impl TeamCa {
    /// The team's CA, made the first time it is needed.
    pub(crate) fn load_or_create(
        state_dir: &Path,
        team: &str,
        owner: Owner,
    ) -> Result<TeamCa, TlsError> {
        let dir = layout::team_ca_dir(state_dir, team);
        if dir.join(TEAM_CA_KEY_NAME).exists() {
            return Self::load(&dir);
        }
        Self::make(&dir, team, owner)
    }

    /// A new CA for the team in place of the old one (whose key is gone with it).
    pub fn rotate(state_dir: &Path, team: &str, owner: Owner) -> Result<TeamCa, TlsError> {
        Self::make(&layout::team_ca_dir(state_dir, team), team, owner)
    }

    fn load(dir: &Path) -> Result<TeamCa, TlsError> {
        let bad = |why: String| TlsError::BadCa {
            dir: dir.to_path_buf(),
            why,
        };
        let read = |name: &str| {
            files::read_small(&dir.join(name), MAX_PEM)
                .ok_or_else(|| bad(format!("{name} is missing or unreadable")))
        };
        let (cert_pem, key_pem) = (read(TEAM_CA_CERT_NAME)?, read(TEAM_CA_KEY_NAME)?);
        let key =
            KeyPair::from_pem(&key_pem).map_err(|e| bad(format!("{TEAM_CA_KEY_NAME}: {e}")))?;
        Issuer::from_ca_cert_pem(&cert_pem, &key)
            .map_err(|e| bad(format!("{TEAM_CA_CERT_NAME}: {e}")))?;
        Ok(TeamCa { cert_pem, key })
    }

    fn make(dir: &Path, team: &str, owner: Owner) -> Result<TeamCa, TlsError> {
        let io = |path: PathBuf| move |source| TlsError::Io { path, source };
        let issue = |e: rcgen::Error| TlsError::Issue {
            host: format!("the CA of team {team}"),
            why: e.to_string(),
        };
        let key = KeyPair::generate().map_err(issue)?;
        let now = OffsetDateTime::now_utc();
        let mut p = CertificateParams::default();
        p.distinguished_name.push(
            DnType::CommonName,
            format!("ateam egress CA of team {team}"),
        );
        p.distinguished_name
            .push(DnType::OrganizationName, "ateam (local, per team)");
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        p.not_before = now - Duration::days(1);
        p.not_after = now + Duration::days(CA_DAYS);
        p.serial_number = Some(serial(&key, now));
        let cert = p.self_signed(&key).map_err(issue)?;
        files::private_dir(dir, owner).map_err(io(dir.to_path_buf()))?;
        // The key first: a certificate without its key is never left to be trusted.
        let key_path = dir.join(TEAM_CA_KEY_NAME);
        files::write_atomic(&key_path, key.serialize_pem().as_bytes(), 0o600, owner)
            .map_err(io(key_path))?;
        let cert_path = dir.join(TEAM_CA_CERT_NAME);
        files::write_atomic(&cert_path, cert.pem().as_bytes(), 0o644, owner)
            .map_err(io(cert_path))?;
        Ok(TeamCa {
            cert_pem: cert.pem(),
            key,
        })
    }

    /// A certificate for one intercepted entry (`api.example.com`, `git.example.com:8443`,
    /// `10.0.0.5:443`): for its name or address, whatever the port.
    #[allow(
        clippy::wildcard_enum_match_arm,
        reason = "rcgen's SanType is non-exhaustive"
    )]
    pub fn issue(&self, entry: &str) -> Result<Leaf, TlsError> {
        let fail = |why: String| TlsError::Issue {
            host: entry.to_string(),
            why,
        };
        let san = match Entry::parse(entry).map_err(fail)?.target {
            Target::Name(n) => SanType::DnsName(n.try_into().map_err(|e| fail(format!("{e}")))?),
            Target::Ip(ip) => SanType::IpAddress(ip),
            Target::Below(d) => {
                return Err(fail(format!(
                    "`*.{d}` is a wildcard: an intercepted entry names one host"
                )));
            }
        };
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, &self.key)
            .map_err(|e| fail(format!("the team's CA: {e}")))?;
        let key = KeyPair::generate().map_err(|e| fail(e.to_string()))?;
        let now = OffsetDateTime::now_utc();
        let mut p = CertificateParams::default();
        let shown = match &san {
            SanType::DnsName(n) => n.as_str().to_string(),
            SanType::IpAddress(ip) => ip.to_string(),
            // rcgen's SanType is non-exhaustive: every other kind is shown as written.
            _ => entry.to_string(),
        };
        p.distinguished_name.push(DnType::CommonName, shown);
        p.subject_alt_names = vec![san];
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
        p.not_before = now - Duration::days(1);
        p.not_after = now + Duration::days(LEAF_DAYS);
        p.serial_number = Some(serial(&key, now));
        let cert = p
            .signed_by(&key, &issuer)
            .map_err(|e| fail(e.to_string()))?;
        Ok(Leaf {
            chain_pem: format!("{}{}", cert.pem(), self.cert_pem),
            key_pem: key.serialize_pem(),
        })
    }

    /// The SHA-256 of the CA's certificate (DER), in hex: what `status` shows of it.
    pub fn fingerprint(&self) -> String {
        fingerprint_of(&self.cert_pem).unwrap_or_default()
    }
}

/// The SHA-256 (hex) of the first certificate in `pem`.
pub(crate) fn fingerprint_of(pem: &str) -> Option<String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let der = CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()?
        .ok()?;
    Some(
        Sha256::digest(der.as_ref())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}

/// Unique per certificate (it hashes the new key), positive and 16 bytes, as RFC 5280 asks.
fn serial(key: &KeyPair, now: OffsetDateTime) -> SerialNumber {
    let mut h = Sha256::new();
    h.update(key.public_key_raw());
    h.update(now.unix_timestamp_nanos().to_be_bytes());
    let mut b: [u8; 16] = h.finalize()[..16].try_into().expect("16 of 32 bytes");
    b[0] &= 0x7f;
    SerialNumber::from_slice(&b)
}

/// The certificates of a PEM text (the image's roots, an upstream CA): only CERTIFICATE
/// blocks, each checked to parse, re-encoded; anything else in the text is dropped.
pub(crate) fn certificates_in(pem: &[u8]) -> Vec<String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .map(|der| {
            let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &der);
            let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
            for line in b64.as_bytes().chunks(64) {
                out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
                out.push('\n');
            }
            out.push_str("-----END CERTIFICATE-----\n");
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Owner {
        Owner {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        }
    }

    #[test]
    fn a_team_ca_is_made_once_kept_private_and_issues_leaves_for_its_hosts() {
        use std::os::unix::fs::PermissionsExt;
        let state = tempfile::tempdir().unwrap();
        let ca = TeamCa::load_or_create(state.path(), "t", me()).unwrap();
        let again = TeamCa::load_or_create(state.path(), "t", me()).unwrap();
        assert_eq!(ca.fingerprint(), again.fingerprint());
        assert_eq!(ca.fingerprint().len(), 64);
        let dir = layout::team_ca_dir(state.path(), "t");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join(TEAM_CA_KEY_NAME)), 0o600);
        assert_eq!(mode(&dir), 0o700);
        let other = TeamCa::load_or_create(state.path(), "u", me()).unwrap();
        assert_ne!(ca.fingerprint(), other.fingerprint(), "two teams, two CAs");

        let leaf = ca.issue("api.example.com").unwrap();
        assert_eq!(certificates_in(leaf.chain_pem.as_bytes()).len(), 2);
        assert!(leaf.key_pem.contains("PRIVATE KEY"));
        assert!(!leaf.key_pem.contains(&ca.key.serialize_pem()));
        assert!(ca.issue("10.1.2.3:8443").is_ok());
        assert!(ca.issue("host.ateam.internal:8443").is_ok());
        let err = ca.issue("*.example.com").unwrap_err().to_string();
        assert!(err.contains("wildcard"), "{err}");

        let rotated = TeamCa::rotate(state.path(), "t", me()).unwrap();
        assert_ne!(rotated.fingerprint(), ca.fingerprint());
        let loaded = TeamCa::load_or_create(state.path(), "t", me()).unwrap();
        assert_eq!(loaded.fingerprint(), rotated.fingerprint());
    }

    #[test]
    fn a_leaf_verifies_against_its_team_ca_for_its_name_only() {
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
        let state = tempfile::tempdir().unwrap();
        let ca = TeamCa::load_or_create(state.path(), "t", me()).unwrap();
        let leaf = ca.issue("api.example.com").unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca.cert_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .unwrap();
        let chain: Vec<CertificateDer> = CertificateDer::pem_slice_iter(leaf.chain_pem.as_bytes())
            .map(Result::unwrap)
            .collect();
        let verify = |name: &str| {
            verifier.verify_server_cert(
                &chain[0],
                &chain[1..],
                &ServerName::try_from(name.to_string()).unwrap(),
                &[],
                UnixTime::now(),
            )
        };
        assert!(verify("api.example.com").is_ok());
        assert!(verify("evil.example.com").is_err());
        let other = TeamCa::load_or_create(state.path(), "u", me()).unwrap();
        let foreign = other.issue("api.example.com").unwrap();
        let chain2: Vec<CertificateDer> =
            CertificateDer::pem_slice_iter(foreign.chain_pem.as_bytes())
                .map(Result::unwrap)
                .collect();
        assert!(
            verifier
                .verify_server_cert(
                    &chain2[0],
                    &[],
                    &ServerName::try_from("api.example.com").unwrap(),
                    &[],
                    UnixTime::now()
                )
                .is_err(),
            "another team's leaf is not trusted"
        );
    }
}
