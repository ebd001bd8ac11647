//! Limits: each member's resources, and admission: members' memory caps, with those of the
//! store's teams that stay, must fit in a share of the host's memory.

use crate::host::Host;
use crate::manifest::quantity::human_bytes;
use crate::model;

/// A member's memory cap when its manifest names none.
pub const DEFAULT_MEMORY: u64 = 1 << 30;
/// Share of host memory that members' caps may add up to (the admission rule; `doctor`
/// reports against it too).
pub const MEMORY_SHARE: f64 = 0.75;

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
