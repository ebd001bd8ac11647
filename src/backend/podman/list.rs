//! Podman: listing containers, by label or by name.

use std::collections::{BTreeMap, HashMap};

use podman_api::models::ListContainer;
use podman_api::opts::{ContainerListFilter, ContainerListOpts};

use super::PodmanBackend;
use super::errors::engine_err;
use crate::backend::{Result, Summary, state_from};

pub(super) async fn list(
    b: &PodmanBackend,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<Summary>> {
    let opts = ContainerListOpts::builder()
        .all(true)
        .filter(
            labels
                .iter()
                .map(|(k, v)| ContainerListFilter::LabelKeyVal(k.clone(), v.clone())),
        )
        .build();
    let list = b
        .podman
        .containers()
        .list(&opts)
        .await
        .map_err(|e| engine_err("list", &e))?;
    // Filtered again here so the result never depends on how the engine combines filters.
    Ok(list
        .iter()
        .filter(|c| labels.is_empty() || c.labels.as_ref().is_some_and(|l| has_labels(l, labels)))
        .map(summary_of)
        .collect())
}

pub(super) async fn find_by_name(b: &PodmanBackend, name: &str) -> Result<Option<Summary>> {
    // Podman's name filter is a regular expression (a substring match): keep the exact one.
    let opts = ContainerListOpts::builder()
        .all(true)
        .filter([ContainerListFilter::Name(name.to_string())])
        .build();
    let list = b
        .podman
        .containers()
        .list(&opts)
        .await
        .map_err(|e| engine_err("list", &e))?;
    Ok(list.iter().map(summary_of).find(|s| s.name == name))
}

/// A list entry as a `Summary`.
pub(super) fn summary_of(c: &ListContainer) -> Summary {
    Summary {
        id: c.id.clone().unwrap_or_default(),
        name: c
            .names
            .as_ref()
            .and_then(|n| n.first())
            .map(|n| n.trim_start_matches('/').to_string())
            .unwrap_or_default(),
        labels: to_btree(c.labels.as_ref()),
        state: state_from(
            c.state.as_deref().unwrap_or(""),
            i64::from(c.exit_code.unwrap_or(0)),
        ),
        created: c.created.map(|t| t.timestamp()).unwrap_or(0),
    }
}

pub(super) fn to_btree(m: Option<&HashMap<String, String>>) -> BTreeMap<String, String> {
    m.map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

pub(super) fn has_labels(have: &HashMap<String, String>, want: &BTreeMap<String, String>) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}

/// `key=value` filters, one a label.
pub(super) fn label_filters(labels: &BTreeMap<String, String>) -> Vec<String> {
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect()
}
