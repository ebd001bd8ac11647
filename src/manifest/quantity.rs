//! Memory and CPU quantities in the units people write in Kubernetes and Docker.

/// Bytes from `512Mi`, `2G`, `1.5Gi`, `512m`, `1024`.
///
/// Kubernetes and Docker disagree on units, so each keeps its own meaning: the binary `Ki Mi Gi
/// Ti` and decimal upper-case `K M G T` as in Kubernetes, the lower-case `b k m g` binary as in
/// `docker run --memory`.
pub fn parse_memory(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a memory size (examples: 512Mi, 2G, 1073741824)"))?;
    let mult: f64 = match unit {
        "" | "b" | "B" => 1.0,
        "K" | "KB" => 1e3,
        "M" | "MB" => 1e6,
        "G" | "GB" => 1e9,
        "T" | "TB" => 1e12,
        "k" | "kb" | "Ki" | "KiB" => 1024.0,
        "m" | "mb" | "Mi" | "MiB" => 1024f64.powi(2),
        "g" | "gb" | "Gi" | "GiB" => 1024f64.powi(3),
        "Ti" | "TiB" => 1024f64.powi(4),
        _ => {
            return Err(format!(
                "`{s}` has an unknown unit `{unit}` (use Ki, Mi, Gi, Ti, K, M, G, T, or k, m, g)"
            ));
        }
    };
    let bytes = n * mult;
    if !bytes.is_finite() || bytes < 1.0 {
        return Err(format!("`{s}` must be a positive memory size"));
    }
    Ok(bytes.round() as u64)
}

/// Billionths of a CPU from `1.5`, `2`, `500m`.
pub fn parse_cpus(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, scale) = match s.strip_suffix('m') {
        Some(n) => (n, 1e6),
        None => (s, 1e9),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a CPU count (examples: 1.5, 2, 500m)"))?;
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
    fn memory_units() {
        for (s, want) in [
            ("512Mi", 512 << 20),
            ("2G", 2_000_000_000),
            ("1.5Gi", 3 << 29),
            ("1024", 1024),
            ("64k", 64 << 10),
            ("64K", 64_000),
            ("512m", 512 << 20),
            ("1Ti", 1 << 40),
        ] {
            assert_eq!(parse_memory(s), Ok(want), "{s}");
        }
        for bad in ["", "Mi", "12Qi", "-1G", "0", "lots"] {
            assert!(parse_memory(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cpu_units() {
        assert_eq!(parse_cpus("1.5"), Ok(1_500_000_000));
        assert_eq!(parse_cpus("500m"), Ok(500_000_000));
        assert_eq!(parse_cpus("2"), Ok(2_000_000_000));
        assert!(parse_cpus("0").is_err());
        assert!(parse_cpus("two").is_err());
    }

    #[test]
    fn human() {
        assert_eq!(human_bytes(512 << 20), "512MiB");
        assert_eq!(human_bytes(1536 << 20), "1.5GiB");
    }
}
