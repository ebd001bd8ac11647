//! Limits: each member's resources, and admission: members' memory caps, with those of the
//! store's teams that stay, must fit in a share of the host's memory.

use super::{Build, Parsed};
use crate::core::quantity::{human_bytes, parse_cpus, parse_memory};
use crate::host::Host;
use crate::manifest::raw::{self, Quantity};
use crate::model;

/// A member's memory cap when its manifest names none.
pub const DEFAULT_MEMORY: u64 = 1 << 30;
/// Share of host memory that members' caps may add up to (the admission rule; `doctor`
/// reports against it too).
pub const MEMORY_SHARE: f64 = 0.75;
const DEFAULT_PIDS: u32 = 512;
/// The least memory the engines start a container with.
const MIN_MEMORY: u64 = 6 << 20;

/// A member's resources, as the model has them.
pub(super) struct Resources {
    pub(super) memory_bytes: u64,
    pub(super) nano_cpus: Option<u64>,
    pub(super) pids: u32,
}

/// Members' memory caps so far, across all the teams judged, against the host's share for
/// them.
pub(super) struct Admission {
    total: u64,
    limit: u64,
    host_memory: u64,
    /// How much of `total` the store's other teams take, as the refusal says it; empty when
    /// nothing.
    earlier_share: String,
}

impl Admission {
    /// Admission counts the members of every team in the store that stays as it is (not
    /// `redefined`).
    pub(super) fn new(host: &Host, applied: &[model::Team], redefined: &[&str]) -> Admission {
        let earlier: Vec<&model::Team> = applied
            .iter()
            .filter(|t| !redefined.contains(&t.name.as_str()))
            .collect();
        let earlier_memory: u64 = earlier
            .iter()
            .flat_map(|t| &t.members)
            .map(|m| m.memory_bytes)
            .sum();
        let earlier_share = if earlier_memory == 0 {
            String::new()
        } else {
            let names: Vec<String> = earlier
                .iter()
                .filter(|t| !t.members.is_empty())
                .map(|t| format!("`{}`", t.name))
                .collect();
            format!(
                " ({} of it in teams applied before: team {})",
                human_bytes(earlier_memory),
                names.join(", team ")
            )
        };
        Admission {
            total: earlier_memory,
            limit: (host.memory_bytes as f64 * MEMORY_SHARE) as u64,
            host_memory: host.memory_bytes,
            earlier_share,
        }
    }

    /// Counts one more member's cap. Only the member that goes over the share is refused,
    /// not every one after it: one problem for one excess.
    pub(super) fn admit(&mut self, memory_bytes: u64) -> Result<(), String> {
        self.total += memory_bytes;
        if self.total > self.limit && self.total - memory_bytes <= self.limit {
            return Err(format!(
                "members' memory caps add up to {} with this one{}, more than 75% of this host's {} ({}); lower some caps or run fewer members",
                human_bytes(self.total),
                self.earlier_share,
                human_bytes(self.host_memory),
                human_bytes(self.limit)
            ));
        }
        Ok(())
    }
}

impl Build<'_> {
    /// The member's limits; a value that cannot be used is reported, and the default (or no
    /// limit, for cpus) taken in its place so that the checks after still run.
    pub(super) fn resources(&mut self, o: &Parsed, r: &raw::Resources) -> Resources {
        let memory_bytes = self.memory(o, r);
        let nano_cpus = self.cpus(o, r);
        let pids = self.pids(o, r);
        Resources {
            memory_bytes,
            nano_cpus,
            pids,
        }
    }

    fn memory(&mut self, o: &Parsed, r: &raw::Resources) -> u64 {
        let Some(q) = &r.memory else {
            return DEFAULT_MEMORY;
        };
        match parse_memory(&quantity_text(q)) {
            Ok(b) if b >= MIN_MEMORY => b,
            Ok(b) => {
                self.problems.push(o.value_problem(
                    "spec.resources.memory",
                    format!("{} is below the engines' minimum of 6MiB", human_bytes(b)),
                ));
                DEFAULT_MEMORY
            }
            Err(e) => {
                self.problems
                    .push(o.value_problem("spec.resources.memory", e));
                DEFAULT_MEMORY
            }
        }
    }

    fn cpus(&mut self, o: &Parsed, r: &raw::Resources) -> Option<u64> {
        let q = r.cpus.as_ref()?;
        match parse_cpus(&quantity_text(q)) {
            Ok(n) => Some(n),
            Err(e) => {
                self.problems
                    .push(o.value_problem("spec.resources.cpus", e));
                None
            }
        }
    }

    fn pids(&mut self, o: &Parsed, r: &raw::Resources) -> u32 {
        let pids = r.pids.unwrap_or(DEFAULT_PIDS);
        if pids < 8 {
            self.problems.push(o.value_problem(
                "spec.resources.pids",
                format!("pids {pids} is too low to start anything; use at least 8"),
            ));
        }
        pids
    }

    /// Counts the member's memory cap toward admission.
    pub(super) fn admit(&mut self, o: &Parsed, memory_bytes: u64) {
        if let Err(e) = self.admission.admit(memory_bytes) {
            self.problems
                .push(o.value_problem("spec.resources.memory", e));
        }
    }
}

pub(super) fn quantity_text(q: &Quantity) -> String {
    match q {
        Quantity::Text(s) => s.clone(),
        Quantity::Number(n) => n.to_string(),
    }
}
