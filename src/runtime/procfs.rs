//! What the kernel says about a container's first process: the truth behind the engine's
//! inspect. Read from `/proc/<pid>/status` after start, before the member's command runs.

use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    pub cap_eff: u64,
    pub cap_bnd: u64,
    pub no_new_privs: bool,
    /// Real uid and gid, as seen from the host.
    pub uid: u32,
    pub gid: u32,
}

pub fn status(pid: u32) -> std::io::Result<ProcStatus> {
    let text = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("status"))?;
    Ok(parse(&text))
}

fn parse(text: &str) -> ProcStatus {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    let hex = |name: &str| u64::from_str_radix(&field(name), 16).unwrap_or(u64::MAX);
    let first = |name: &str| {
        field(name)
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(u32::MAX)
    };
    ProcStatus {
        cap_eff: hex("CapEff:"),
        cap_bnd: hex("CapBnd:"),
        no_new_privs: field("NoNewPrivs:") == "1",
        uid: first("Uid:"),
        gid: first("Gid:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status() {
        let s = "Name:\tsleep\nUid:\t1001\t1001\t1001\t1001\nGid:\t1001\t1001\t1001\t1001\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\n";
        assert_eq!(
            parse(s),
            ProcStatus {
                cap_eff: 0,
                cap_bnd: 0,
                no_new_privs: true,
                uid: 1001,
                gid: 1001
            }
        );
        let me = status(std::process::id()).unwrap();
        assert_eq!(me.uid, rustix::process::getuid().as_raw());
    }
}
