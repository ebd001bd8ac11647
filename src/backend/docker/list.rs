//! Docker: listing containers, by label or by name.

use std::collections::{BTreeMap, HashMap};

use bollard::models::ContainerSummary;
use bollard::query_parameters::ListContainersOptions;

use super::DockerBackend;
use crate::backend::{Backend, BackendError, Result, Summary, state_from};

impl DockerBackend {
    pub(super) async fn list_filtered(
        &self,
        filters: HashMap<String, Vec<String>>,
    ) -> Result<Vec<Summary>> {
        let opts = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let found = self
            .docker
            .list_containers(Some(opts))
            .await
            .map_err(|e| self.engine_err("list containers", e))?;
        let mut out = Vec::with_capacity(found.len());
        for c in found {
            // None: it went away between the list and a closer look; it is not there any more.
            out.extend(self.summary_of(c).await?);
        }
        Ok(out)
    }

    pub(super) async fn summary_of(&self, c: ContainerSummary) -> Result<Option<Summary>> {
        let id = c.id.unwrap_or_default();
        let status_word = c.state.map(|s| s.as_ref().to_string()).unwrap_or_default();
        let state = if status_word == "exited" {
            // The list only carries the exit code inside its human-readable Status; when that
            // text does not parse, ask the container itself rather than guess.
            match c.status.as_deref().and_then(exit_code_from_status) {
                Some(code) => state_from(&status_word, code),
                None => match self.inspect(&id).await {
                    Ok(i) => i.summary.state,
                    Err(BackendError::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(e),
                },
            }
        } else {
            state_from(&status_word, 0)
        };
        Ok(Some(Summary {
            name: primary_name(c.names.as_deref().unwrap_or_default()),
            labels: c.labels.unwrap_or_default().into_iter().collect(),
            state,
            created: c.created.unwrap_or(0),
            id,
        }))
    }
}

pub(super) async fn list(
    b: &DockerBackend,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<Summary>> {
    let mut filters = HashMap::new();
    if !labels.is_empty() {
        filters.insert("label".to_string(), label_filters(labels));
    }
    b.list_filtered(filters).await
}

pub(super) async fn find_by_name(b: &DockerBackend, name: &str) -> Result<Option<Summary>> {
    // Docker's name filter is an unanchored regex: anchor and escape it, and still compare
    // exactly, so that `a` never finds `a-b` or `xa`.
    let filters = HashMap::from([(
        "name".to_string(),
        vec![format!("^/{}$", regex_escape(name))],
    )]);
    Ok(b.list_filtered(filters)
        .await?
        .into_iter()
        .find(|s| s.name == name))
}

/// `key=value` filters, one a label.
pub(super) fn label_filters(labels: &BTreeMap<String, String>) -> Vec<String> {
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// A linked container also lists `/other/alias` names; its own name is the one without a
/// second slash.
pub(super) fn primary_name(names: &[String]) -> String {
    let stripped = names.iter().map(|n| n.trim_start_matches('/'));
    stripped
        .clone()
        .find(|n| !n.contains('/'))
        .or_else(|| stripped.clone().next())
        .unwrap_or_default()
        .to_string()
}

/// `Exited (137) 3 minutes ago` -> 137.
pub(super) fn exit_code_from_status(status: &str) -> Option<i64> {
    let rest = status.strip_prefix("Exited (")?;
    rest.split(')').next()?.trim().parse().ok()
}

/// Escapes every ASCII punctuation character, which Go's regexp always takes literally.
pub(super) fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if c.is_ascii() && !c.is_ascii_alphanumeric() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
