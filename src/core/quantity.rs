//! Memory and CPU quantities, written as Kubernetes writes them.
//!
//! One rule for memory, Kubernetes': a plain number of bytes, or a number with a binary suffix
//! `Ki Mi Gi Ti Pi Ei` (powers of 1024) or a decimal one `k M G T P E` (powers of 1000),
//! case-sensitive. Spellings from elsewhere (`1gb`, `512m`, `64K`, `2GiB`) meant different
//! things in different tools, so they are refused, with the two spellings that were likely
//! meant. The patterns below are also the JSON Schema's (`raw::json_schema`), so an editor
//! flags what validation refuses.

/// A memory quantity, as a regular expression (the JSON Schema's `pattern`).
pub(crate) const MEMORY_PATTERN: &str = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$";
/// A CPU quantity: CPUs (`1.5`) or thousandths of one (`500m`).
pub(crate) const CPUS_PATTERN: &str = r"^[0-9]+(\.[0-9]+)?m?$";

/// The suffixes, each with its multiplier and what it is called in messages.
const SUFFIXES: [(&str, f64); 12] = [
    ("Ki", 1024.0),
    ("Mi", 1048576.0),
    ("Gi", 1073741824.0),
    ("Ti", 1099511627776.0),
    ("Pi", 1125899906842624.0),
    ("Ei", 1152921504606846976.0),
    ("k", 1e3),
    ("M", 1e6),
    ("G", 1e9),
    ("T", 1e12),
    ("P", 1e15),
    ("E", 1e18),
];

/// Splits `12.5Gi` into `12.5` and `Gi`; `None` when it does not start with digits in the
/// form `N` or `N.N`.
fn split_number(s: &str) -> Option<(f64, &str)> {
    let end = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, rest) = s.split_at(end);
    let mut parts = num.split('.');
    let whole = parts.next()?;
    let frac = parts.next();
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || frac.is_some_and(|f| !digits(f)) || parts.next().is_some() {
        return None;
    }
    Some((num.parse().ok()?, rest))
}

/// Bytes from `512Mi`, `2G`, `1.5Gi`, `1073741824` (see the module's rule). A fraction of a
/// byte is rounded up, as Kubernetes does.
pub fn parse_memory(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let Some((n, unit)) = split_number(s) else {
        return Err(format!(
            "`{s}` is not a memory size (examples: 512Mi, 2Gi, 1G, 1073741824)"
        ));
    };
    let mult = if unit.is_empty() {
        1.0
    } else {
        match SUFFIXES.iter().find(|(u, _)| *u == unit) {
            Some((_, m)) => *m,
            None => return Err(unit_hint(s, unit)),
        }
    };
    let bytes = (n * mult).ceil();
    if bytes < 1.0 {
        return Err(format!("`{s}` must be a positive memory size"));
    }
    if bytes >= u64::MAX as f64 {
        return Err(format!("`{s}` is too large a memory size"));
    }
    Ok(bytes as u64)
}

/// Why `unit` is not one, and which spellings were likely meant.
fn unit_hint(s: &str, unit: &str) -> String {
    // `GiB`, `gb`, `g` and `gi` all stem from `g`.
    let lower = unit.to_ascii_lowercase();
    let stem = lower.strip_suffix('b').unwrap_or(&lower);
    let stem = stem.strip_suffix('i').unwrap_or(stem);
    let num = s.strip_suffix(unit).unwrap_or(s);
    let pair = match stem {
        "k" => Some(("Ki", "1024", "k", "1000")),
        "m" => Some(("Mi", "1024²", "M", "10⁶")),
        "g" => Some(("Gi", "1024³", "G", "10⁹")),
        "t" => Some(("Ti", "1024⁴", "T", "10¹²")),
        "p" => Some(("Pi", "1024⁵", "P", "10¹⁵")),
        "e" => Some(("Ei", "1024⁶", "E", "10¹⁸")),
        _ => None,
    };
    match (unit, pair) {
        ("b" | "B", _) => format!("`{s}`: a plain number is bytes; write `{num}` without a unit"),
        // Docker's `512m` is MiB; in Kubernetes `m` is a thousandth: say both.
        ("m", Some((bin, bsize, dec, dsize))) => format!(
            "`{s}`: `m` is a thousandth in Kubernetes and MiB in Docker; write `{num}{bin}` ({bsize} bytes) or `{num}{dec}` ({dsize} bytes)"
        ),
        (_, Some((bin, bsize, dec, dsize))) => format!(
            "`{s}`: memory units are case-sensitive, as in Kubernetes, and take no `B`; write `{num}{bin}` ({bsize} bytes) or `{num}{dec}` ({dsize} bytes)"
        ),
        _ => format!(
            "`{s}` has an unknown unit `{unit}` (use Ki, Mi, Gi, Ti, Pi, Ei for powers of 1024, k, M, G, T, P, E for powers of 1000, or none for bytes)"
        ),
    }
}

/// Billionths of a CPU from `1.5`, `2`, `500m`.
pub fn parse_cpus(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let scale = match split_number(s) {
        Some((n, "")) => Some((n, 1e9)),
        Some((n, "m")) => Some((n, 1e6)),
        _ => None,
    };
    let Some((n, scale)) = scale else {
        return Err(format!("`{s}` is not a CPU count (examples: 1.5, 2, 500m)"));
    };
    let nano = n * scale;
    if !nano.is_finite() || nano < 1e6 {
        return Err(format!("`{s}` must be at least 0.001 CPU"));
    }
    Ok(nano.round() as u64)
}

/// Human form of a byte count, for messages.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{v}{}", UNITS[i])
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_units_follow_kubernetes() {
        for (s, want) in [
            ("512Mi", 512 << 20),
            ("2G", 2_000_000_000),
            ("1.5Gi", 3 << 29),
            ("1024", 1024),
            ("64k", 64_000),
            ("64Ki", 64 << 10),
            ("1Ti", 1 << 40),
            ("1Ei", 1 << 60),
            ("0.5k", 500),
            ("1.0001k", 1001),
            (" 2Gi ", 2 << 30),
        ] {
            assert_eq!(parse_memory(s), Ok(want), "{s}");
        }
        for bad in [
            "", "Mi", "12Qi", "-1G", "0", "lots", "1e9", ".5Gi", "1.Gi", "1..2G", "16Ei",
        ] {
            assert!(parse_memory(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn other_spellings_are_refused_with_what_was_meant() {
        for (s, hint) in [
            ("1gb", "write `1Gi` (1024³ bytes) or `1G` (10⁹ bytes)"),
            ("1GB", "write `1Gi` (1024³ bytes) or `1G` (10⁹ bytes)"),
            ("1g", "write `1Gi` (1024³ bytes) or `1G` (10⁹ bytes)"),
            ("2GiB", "write `2Gi` (1024³ bytes) or `2G` (10⁹ bytes)"),
            ("64K", "write `64Ki` (1024 bytes) or `64k` (1000 bytes)"),
            (
                "512m",
                "`m` is a thousandth in Kubernetes and MiB in Docker; write `512Mi`",
            ),
            ("512mi", "write `512Mi` (1024² bytes) or `512M` (10⁶ bytes)"),
            (
                "1024B",
                "a plain number is bytes; write `1024` without a unit",
            ),
            ("512Q", "has an unknown unit `Q`"),
        ] {
            let e = parse_memory(s).unwrap_err();
            assert!(e.contains(hint), "{s}: {e}");
        }
    }

    #[test]
    fn cpu_units() {
        assert_eq!(parse_cpus("1.5"), Ok(1_500_000_000));
        assert_eq!(parse_cpus("500m"), Ok(500_000_000));
        assert_eq!(parse_cpus("2"), Ok(2_000_000_000));
        assert_eq!(parse_cpus("0.25"), Ok(250_000_000));
        for bad in ["0", "two", "1e3", "-1", "1.5.2", "500M", "0.1m"] {
            assert!(parse_cpus(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn human() {
        assert_eq!(human_bytes(512 << 20), "512MiB");
        assert_eq!(human_bytes(1536 << 20), "1.5GiB");
    }
}
