//! The manifest loader on random and mutated input: whatever the bytes, reading, parsing and
//! validating them must not panic and must finish within `PER_INPUT`.
//!
//! Inputs come from a small seeded generator (no dependency, and every run is the same run):
//! random bytes biased to YAML's own characters, mutations of the example team, random alias
//! structures, and deep nesting. A failure prints the seed and case; set `ATEAM_FUZZ_SEED` and
//! `ATEAM_FUZZ_CASES` to replay it or to search longer.

#![allow(
    clippy::unwrap_used,
    clippy::wildcard_enum_match_arm,
    reason = "a test that unwraps fails loudly, and a test matches the variant it expects"
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ateam::host::Host;
use ateam::manifest::{read_sources, validate};

/// CPU time per input, in a debug build; the slowest seen take about 150 ms (those that expand
/// aliases up to the loader's budget). CPU time rather than wall time, so that a loaded machine
/// does not fail the test while a loader that does too much work still does.
const PER_INPUT: Duration = Duration::from_secs(1);
const DEFAULT_SEED: u64 = 0x6174_6561_6d21;
const DEFAULT_CASES: usize = 2500;

/// SplitMix64: tiny, and good enough to spread inputs around.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// 0..n
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Pieces of YAML syntax, so that random text often gets past the scanner.
#[rustfmt::skip]
const TOKENS: &[&str] = &[
    "-", "- ", ":", ": ", "[", "]", "{", "}", ",", "&a", "&b ", "*a", "*b", "!tag ", "!!str ",
    "|", ">", "|-", "'", "\"", "#", "\n", "\n  ", "\n    ", " ", "?", "? ", "%YAML 1.2\n",
    "---\n", "...\n", "\t", "\\", "\\u00e9", "\\L", "name", "kind", "apiVersion", "metadata",
    "spec", "Team", "Member", "MainSession", "AccessGrant", "ateam.dev/v1alpha1", "parent",
    "lead", "~", "null", "true", "0x1F", "1e9", ".inf", "-1", "512Mi", "é", "\u{feff}", "\r\n",
    "\u{2028}",
];

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    let len = rng.below(512);
    (0..len)
        .map(|_| match rng.below(4) {
            0 => rng.below(256) as u8,
            _ => *rng.pick(b"-:[]{},&*!|>'\"#\n ?%@`abcxyz019"),
        })
        .collect()
}

fn token_soup(rng: &mut Rng) -> Vec<u8> {
    let n = rng.below(200);
    (0..n).flat_map(|_| rng.pick(TOKENS).bytes()).collect()
}

/// The example team with a few random edits: cut, copied, inserted or swapped pieces.
fn mutated_example(rng: &mut Rng, example: &[u8]) -> Vec<u8> {
    let mut t = example.to_vec();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(t.len() + 1);
        match rng.below(7) {
            0 if at < t.len() => {
                let end = (at + rng.below(40)).min(t.len());
                t.drain(at..end);
            }
            1 => {
                let token = rng.pick(TOKENS).as_bytes().to_vec();
                t.splice(at..at, token);
            }
            2 if at < t.len() => {
                let end = (at + rng.below(200)).min(t.len());
                let piece = t[at..end].to_vec();
                let to = rng.below(t.len() + 1);
                t.splice(to..to, piece);
            }
            3 if at < t.len() => t[at] = rng.below(256) as u8,
            4 => t.truncate(at),
            5 => {
                // An anchor on one value and an alias at another place.
                t.splice(at..at, b"&x ".iter().copied());
                let to = rng.below(t.len() + 1);
                t.splice(to..to, b"*x".iter().copied());
            }
            _ if at < t.len() => {
                let other = rng.below(t.len());
                t.swap(at, other);
            }
            _ => {}
        }
    }
    t
}

/// Layers of anchors, each aliasing earlier ones a random number of times, in flow or block
/// style: from harmless to "billion laughs".
fn alias_structure(rng: &mut Rng) -> Vec<u8> {
    let levels = 1 + rng.below(12);
    let mut text = String::from("l0: &l0 [lol, lol]\n");
    for i in 1..levels {
        // Half the uses name the level just below: growth is often exponential.
        let uses: Vec<String> = (0..1 + rng.below(12))
            .map(|_| match rng.below(2) {
                0 => format!("*l{}", i - 1),
                _ => format!("*l{}", rng.below(i)),
            })
            .collect();
        if rng.below(2) == 0 {
            text.push_str(&format!("l{i}: &l{i} [{}]\n", uses.join(", ")));
        } else {
            text.push_str(&format!("l{i}: &l{i}\n"));
            for u in uses {
                text.push_str(&format!("  - {u}\n"));
            }
        }
    }
    if rng.below(3) == 0 {
        // Sometimes inside a manifest, where validation sees the expansion.
        text = format!(
            "apiVersion: ateam.dev/v1alpha1\nkind: Member\nmetadata: {{name: m}}\nspec:\n  parent: lead\n  labels:\n    {}",
            text.replace('\n', "\n    ")
        );
    }
    text.into_bytes()
}

fn deep_nesting(rng: &mut Rng) -> Vec<u8> {
    let depth = rng.below(300);
    let open: &[&str] = &["[", "{a: ", "- ", "a:\n", "? "];
    let mut text = String::new();
    for _ in 0..depth {
        text.push_str(rng.pick::<&str>(open));
    }
    text.push('x');
    for _ in 0..rng.below(depth + 1) {
        text.push_str(rng.pick::<&str>(&["]", "}", "\n"]));
    }
    text.into_bytes()
}

/// Reads `input` as standard input would be read, then validates it as if it stood beside the
/// example team (so that its relative paths resolve to real folders).
fn load(input: &[u8], host: &Host, dir: &Path) -> usize {
    let (mut sources, mut problems) = read_sources(&[PathBuf::from("-")], &mut &input[..]);
    for s in &mut sources {
        s.dir = dir.to_path_buf();
    }
    if let Err(more) = validate(&sources, host, &[]) {
        problems.extend(more);
    }
    // Rendering is part of the path a user sees.
    problems.iter().map(|p| p.to_string().len()).sum()
}

/// CPU time of this thread so far, from the scheduler's own count; wall time where that is not
/// available.
fn cpu_time() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .map(Duration::from_nanos)
        .unwrap_or_else(|| START.with(|t| t.elapsed()))
}

thread_local! {
    static START: Instant = Instant::now();
}

#[test]
fn random_and_mutated_manifests_neither_panic_nor_stall() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    let seed = env("ATEAM_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let cases = env("ATEAM_FUZZ_CASES").map_or(DEFAULT_CASES, |n| n as usize);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("examples/demo-team");
    let example = std::fs::read(dir.join("team.yaml")).unwrap();
    let host = Host {
        uid: 1000,
        gid: 1000,
        home: "/nonexistent-home".into(),
        state_dir: "/nonexistent-home/.local/state/ateam".into(),
        memory_bytes: 8 << 30,
        engine_dirs: Default::default(),
        sudo_user: None,
    };
    // The unmodified example is valid: mutations start from something that gets far.
    let (sources, problems) = read_sources(&[PathBuf::from("-")], &mut &example[..]);
    assert!(problems.is_empty());
    let mut sources = sources;
    sources[0].dir = dir.clone();
    validate(&sources, &host, &[]).expect("the example is valid");

    let started = Instant::now();
    let mut rng = Rng(seed);
    let mut slowest = (Duration::ZERO, 0);
    for case in 0..cases {
        let input = match case % 5 {
            0 => random_bytes(&mut rng),
            1 => token_soup(&mut rng),
            2 | 3 => mutated_example(&mut rng, &example),
            _ if case % 10 == 4 => alias_structure(&mut rng),
            _ => deep_nesting(&mut rng),
        };
        let t = cpu_time();
        let outcome = std::panic::catch_unwind(|| load(&input, &host, &dir));
        let took = cpu_time() - t;
        let show = || {
            format!(
                "seed {seed:#x}, case {case}; input ({} bytes):\n{}",
                input.len(),
                String::from_utf8_lossy(&input[..input.len().min(4000)])
            )
        };
        assert!(outcome.is_ok(), "the loader panicked on {}", show());
        assert!(took < PER_INPUT, "took {took:?} on {}", show());
        slowest = slowest.max((took, case));
    }
    eprintln!(
        "{cases} inputs in {:?}; slowest {:?} (case {})",
        started.elapsed(),
        slowest.0,
        slowest.1
    );
}
