//! `classtype` → (description, priority): Suricata's stock `classification.config`, built
//! in, plus whatever a configured `classification.config` file adds or overrides.

use std::collections::HashMap;

/// Suricata's stock classification.config: short name, description, priority.
const BUILTIN: &[(&str, &str, u8)] = &[
    ("not-suspicious", "Not Suspicious Traffic", 3),
    ("unknown", "Unknown Traffic", 3),
    ("bad-unknown", "Potentially Bad Traffic", 2),
    ("attempted-recon", "Attempted Information Leak", 2),
    ("successful-recon-limited", "Information Leak", 2),
    (
        "successful-recon-largescale",
        "Large Scale Information Leak",
        2,
    ),
    ("attempted-dos", "Attempted Denial of Service", 2),
    ("successful-dos", "Denial of Service", 2),
    ("attempted-user", "Attempted User Privilege Gain", 1),
    ("unsuccessful-user", "Unsuccessful User Privilege Gain", 1),
    ("successful-user", "Successful User Privilege Gain", 1),
    (
        "attempted-admin",
        "Attempted Administrator Privilege Gain",
        1,
    ),
    (
        "successful-admin",
        "Successful Administrator Privilege Gain",
        1,
    ),
    ("rpc-portmap-decode", "Decode of an RPC Query", 2),
    ("shellcode-detect", "Executable code was detected", 1),
    ("string-detect", "A suspicious string was detected", 3),
    (
        "suspicious-filename-detect",
        "A suspicious filename was detected",
        2,
    ),
    (
        "suspicious-login",
        "An attempted login using a suspicious username was detected",
        2,
    ),
    ("system-call-detect", "A system call was detected", 2),
    ("tcp-connection", "A TCP connection was detected", 4),
    ("trojan-activity", "A Network Trojan was detected", 1),
    (
        "unusual-client-port-connection",
        "A client was using an unusual port",
        2,
    ),
    ("network-scan", "Detection of a Network Scan", 3),
    (
        "denial-of-service",
        "Detection of a Denial of Service Attack",
        2,
    ),
    (
        "non-standard-protocol",
        "Detection of a non-standard protocol or event",
        2,
    ),
    (
        "protocol-command-decode",
        "Generic Protocol Command Decode",
        3,
    ),
    (
        "web-application-activity",
        "access to a potentially vulnerable web application",
        2,
    ),
    ("web-application-attack", "Web Application Attack", 1),
    ("misc-activity", "Misc activity", 3),
    ("misc-attack", "Misc Attack", 2),
    ("icmp-event", "Generic ICMP event", 3),
    (
        "inappropriate-content",
        "Inappropriate Content was Detected",
        1,
    ),
    (
        "policy-violation",
        "Potential Corporate Privacy Violation",
        1,
    ),
    (
        "default-login-attempt",
        "Attempt to login by a default username and password",
        2,
    ),
    (
        "targeted-activity",
        "Targeted Malicious Activity was Detected",
        1,
    ),
    ("exploit-kit", "Exploit Kit Activity Detected", 1),
    (
        "external-ip-check",
        "Device Retrieving External IP Address Detected",
        2,
    ),
    ("domain-c2", "Domain Observed Used for C2 Detected", 1),
    ("pup-activity", "Possibly Unwanted Program Detected", 2),
    (
        "credential-theft",
        "Successful Credential Theft Detected",
        1,
    ),
    (
        "social-engineering",
        "Possible Social Engineering Attempted",
        2,
    ),
    ("coin-mining", "Crypto Currency Mining Activity Detected", 2),
    (
        "command-and-control",
        "Malware Command and Control Activity Detected",
        1,
    ),
];

/// The priority of a rule with neither `classtype` nor `priority` (Suricata's default).
pub(crate) const DEFAULT_PRIORITY: u8 = 3;

/// Class names to (description, priority).
#[derive(Debug, Clone)]
pub(crate) struct Classes(HashMap<String, (String, u8)>);

impl Default for Classes {
    fn default() -> Self {
        Classes(
            BUILTIN
                .iter()
                .map(|&(n, d, p)| (n.to_string(), (d.to_string(), p)))
                .collect(),
        )
    }
}

impl Classes {
    pub(crate) fn get(&self, name: &str) -> Option<&(String, u8)> {
        self.0.get(name)
    }

    /// Adds the `config classification: name,description,priority` lines of a file;
    /// errors name the line.
    pub(crate) fn load_text(&mut self, text: &str) -> Result<(), (usize, String)> {
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let bad = || {
                (
                    i + 1,
                    format!(
                        "expected `config classification: name,description,priority`, got `{l}`"
                    ),
                )
            };
            let rest = l.strip_prefix("config classification:").ok_or_else(bad)?;
            let parts: Vec<&str> = rest.split(',').map(str::trim).collect();
            let [name, desc, prio] = parts[..] else {
                return Err(bad());
            };
            let prio: u8 = prio.parse().map_err(|_| bad())?;
            if name.is_empty() {
                return Err(bad());
            }
            self.0.insert(name.to_string(), (desc.to_string(), prio));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_and_file() {
        let mut c = Classes::default();
        assert_eq!(c.get("trojan-activity").unwrap().1, 1);
        c.load_text("# x\nconfig classification: local,Local thing,4\n")
            .unwrap();
        assert_eq!(c.get("local").unwrap(), &("Local thing".to_string(), 4));
        assert_eq!(c.load_text("\nbogus").unwrap_err().0, 2);
    }
}
