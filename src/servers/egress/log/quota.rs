//! How many refusals a minute the proxy writes one by one. A member decides what it asks
//! for, so it decides how many refusals there are: written one by one without end, its own
//! noise would rotate its earlier refusals out of the refusal log as surely as allowed lines
//! rotate them out of the main one. So in each minute (of the clock, `ts / 60`) the first
//! `FULL_PER_MINUTE` refusals, within `FULL_BYTES_PER_MINUTE`, are written in full; the rest
//! are counted, by destination for the first `SUMMARY_KEYS` of them and together (`OTHERS`)
//! past that, and written as one summary line each (`Event::count`) once the minute is over.
//! At most `MAX_BYTES_PER_MINUTE` a minute reach the refusal log, whatever the member does.

use std::collections::BTreeMap;

use super::{Event, Verdict};

/// Refusals a minute written one by one.
pub const FULL_PER_MINUTE: u32 = 100;
/// Bytes a minute of refusals written one by one (a line past it is counted instead).
pub const FULL_BYTES_PER_MINUTE: u64 = 16 * 1024;
/// Destinations a minute counted each on its own summary line; further ones share `OTHERS`.
pub const SUMMARY_KEYS: usize = 4;
/// The host of the summary line of refusals of further destinations (port 0).
pub const OTHERS: &str = "*";
/// A host longer than this is counted under `OTHERS` (its summary line stays short).
const SUMMARY_HOST_MAX: usize = 64;
/// The longest method and reason a summary line copies, in characters.
const SUMMARY_TEXT_MAX: usize = 96;

/// The most a minute writes to the refusal log: the full lines' budget and the summaries
/// (`SUMMARY_KEYS` + 1 lines of at most 2 KiB: clipped texts, escaped at most sixfold).
pub const MAX_BYTES_PER_MINUTE: u64 = FULL_BYTES_PER_MINUTE + (SUMMARY_KEYS as u64 + 1) * 2048;

/// This minute's refusals written and counted.
#[derive(Debug, Default)]
pub struct Quota {
    minute: Option<i64>,
    lines: u32,
    bytes: u64,
    counted: BTreeMap<(String, u16), Event>,
}

fn minute(ts: f64) -> i64 {
    (ts / 60.0).floor() as i64
}

fn clip(s: &str) -> String {
    s.chars().take(SUMMARY_TEXT_MAX).collect()
}

impl Quota {
    /// Before writing anything of time `ts`: the summary lines of an earlier minute that are
    /// now due, and the count started again for `ts`'s minute.
    pub fn turn(&mut self, ts: f64) -> Vec<Event> {
        let now = minute(ts);
        if self.minute == Some(now) {
            return Vec::new();
        }
        self.minute = Some(now);
        self.lines = 0;
        self.bytes = 0;
        self.summaries()
    }

    /// The summary lines counted so far (the proxy is going away); counting starts again.
    pub fn summaries(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.counted).into_values().collect()
    }

    /// Whether the refusal `e`, a line of `len` bytes, is written in full (it is then taken
    /// into the minute's budget); if not, it is counted for the minute's summary.
    pub fn admit(&mut self, e: &Event, len: usize) -> bool {
        let len = len as u64;
        if self.lines < FULL_PER_MINUTE && self.bytes + len <= FULL_BYTES_PER_MINUTE {
            self.lines += 1;
            self.bytes += len;
            return true;
        }
        let mut key = (e.host.clone(), e.port);
        let own = key.0.len() <= SUMMARY_HOST_MAX
            && (self.counted.contains_key(&key) || self.counted.len() < SUMMARY_KEYS);
        if !own {
            key = (OTHERS.to_string(), 0);
        }
        let s = self.counted.entry(key).or_insert_with(|| Event {
            ts: e.ts,
            verdict: Verdict::Refused,
            method: if own { clip(&e.method) } else { "-".into() },
            host: if own { e.host.clone() } else { OTHERS.into() },
            port: if own { e.port } else { 0 },
            path: None,
            addr: None,
            status: e.status,
            reason: None,
            count: Some(0),
            learned: false,
        });
        s.ts = s.ts.max(e.ts);
        s.status = e.status;
        s.count = Some(s.count.unwrap_or(0) + 1);
        s.reason = Some(if own {
            e.reason.as_deref().map(clip).unwrap_or_default()
        } else {
            "refused; of destinations past the minute's first few counted, counted together".into()
        });
        false
    }
}
