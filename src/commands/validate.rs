//! `ateam validate -f FILES`: judge manifests as apply would (against the teams in the
//! store), without an engine or a change, so a mistake is found before it can cost a start.

use anyhow::Context;

use crate::cli::{Files, Global, ShowFormat};
use ateam::app::Manifests;

use super::exit::Exit;

/// 0 valid; invalid manifests are an error that `exit::classify` maps to 3.
pub fn run(global: &Global, files: &Files, show: Option<ShowFormat>) -> anyhow::Result<Exit> {
    let app = super::common::app(global);
    // As apply would judge them: against the teams in the store (reading it changes nothing).
    let applied = app.store.teams().context("reading the applied state")?;
    let desired = Manifests::read(&files.files).and_then(|m| m.validate(&app.host, &applied))?;
    // Advice, not a refusal: such an entry still works for a client that uses the proxy.
    for line in advice(&desired) {
        eprintln!("{line}");
    }
    if let Some(format) = show {
        let text = match format {
            ShowFormat::Yaml => serde_saphyr::to_string(&desired).context("rendering the model")?,
            ShowFormat::Json => {
                serde_json::to_string_pretty(&desired).context("rendering the model")? + "\n"
            }
        };
        out!("{text}");
    } else {
        let count =
            |f: fn(&ateam::model::Team) -> usize| desired.teams.iter().map(f).sum::<usize>();
        outln!(
            "valid: {} team(s), {} main session(s), {} member(s), {} grant(s)",
            desired.teams.len(),
            count(|t| t.sessions.len()),
            count(|t| t.members.len()),
            count(|t| t.grants.len()),
        );
    }
    Ok(Exit::Ok)
}

/// A warning for each allow entry that names loopback by address (see `Entry::advice`).
fn advice(desired: &ateam::model::Model) -> Vec<String> {
    let mut out = Vec::new();
    for t in &desired.teams {
        for g in &t.grants {
            let ateam::model::Network::Allow(list) = &g.network else {
                continue;
            };
            for (i, h) in list.iter().enumerate() {
                if let Some(a) = ateam::core::egress::Entry::parse(h)
                    .ok()
                    .and_then(|e| e.advice())
                {
                    out.push(format!(
                        "warning: team {}: AccessGrant/{} spec.network.allow[{i}]: {a}",
                        t.name, g.name
                    ));
                }
            }
        }
    }
    out
}
