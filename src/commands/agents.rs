//! `ateam agents pull`: an agent's native build into the host's agent cache before an apply
//! needs it (offline with `--from`), as apply would fetch it (`runtime::agents`).

use std::path::Path;

use anyhow::bail;

use ateam::core::agents::{self, AgentKind, Build, Cached};
use ateam::host::Host;

use super::exit::Exit;

/// Fetches (or takes from `from`) and checks the build; prints its folder.
pub async fn pull(
    name: &str,
    version: Option<String>,
    sha256: Option<String>,
    from: Option<&Path>,
) -> anyhow::Result<Exit> {
    let Some(kind) = AgentKind::parse(name) else {
        bail!("`{name}` is not an agent ateam knows: claude or codex");
    };
    let pinned = kind.pinned();
    if let Some(v) = &version {
        agents::check_version(v).map_err(anyhow::Error::msg)?;
    }
    let version = version.unwrap_or(pinned.version.clone());
    let sha256 = match sha256 {
        Some(s) if agents::is_sha256(&s) => s,
        Some(s) => bail!("--sha256 `{s}` is not a SHA-256 (64 lowercase hex digits)"),
        None if version == pinned.version => pinned.sha256,
        None => bail!(
            "ateam pins the checksum of {name} {} only: give --sha256 of {version}'s npm tarball",
            pinned.version
        ),
    };
    let build = Build {
        kind,
        version,
        sha256,
    };
    let agents_dir = ateam::manifest::reach::real_path(&Host::detect(None).agents_dir());
    let c = Cached {
        dir: agents_dir.join(build.dir_name()),
        build,
    };
    match from {
        Some(f) => ateam::runtime::agents::install_from(&c, f),
        None => ateam::runtime::agents::ensure(&c).await,
    }?;
    outln!("{}", c.dir.display());
    Ok(Exit::Ok)
}
