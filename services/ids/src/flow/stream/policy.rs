//! How a host's TCP resolves overlapping segments ([`StreamPolicy`], Suricata's
//! `host-os-policy` names), as reassembly follows it.

/// How a host's TCP resolves a segment that overlaps held out-of-order data: Suricata's
/// `host-os-policy` names, after Novak's target-based reassembly. Bytes already
/// contiguous are never replaced, whatever the policy (the host has queued them for the
/// application), except with [`StreamPolicy::Last`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StreamPolicy {
    /// The first bytes received win.
    First,
    /// The last bytes received win.
    Last,
    /// Linux 2.6.27 and later (the default): the segment that starts first wins; of two
    /// starting together, the later one if it is longer.
    #[default]
    Linux,
    /// Linux before 2.6.27.
    OldLinux,
    /// BSD: a later segment wins where it starts before the held one.
    Bsd,
    /// BSD, right-favouring: the held bytes win.
    BsdRight,
    /// Windows (XP, 2000).
    Windows,
    /// Windows Server 2003.
    Windows2k3,
    /// Windows Vista and later: the held bytes win.
    Vista,
    /// Solaris.
    Solaris,
    /// Solaris before 10: the held bytes win.
    OldSolaris,
    /// HP-UX 10.
    Hpux10,
    /// HP-UX 11.
    Hpux11,
    /// IRIX.
    Irix,
    /// macOS.
    Macos,
}

impl StreamPolicy {
    /// Every policy with its configuration name (Suricata's `host-os-policy` keys).
    pub const NAMES: [(&'static str, StreamPolicy); 15] = [
        ("first", StreamPolicy::First),
        ("last", StreamPolicy::Last),
        ("linux", StreamPolicy::Linux),
        ("old-linux", StreamPolicy::OldLinux),
        ("bsd", StreamPolicy::Bsd),
        ("bsd-right", StreamPolicy::BsdRight),
        ("windows", StreamPolicy::Windows),
        ("windows2k3", StreamPolicy::Windows2k3),
        ("vista", StreamPolicy::Vista),
        ("solaris", StreamPolicy::Solaris),
        ("old-solaris", StreamPolicy::OldSolaris),
        ("hpux10", StreamPolicy::Hpux10),
        ("hpux11", StreamPolicy::Hpux11),
        ("irix", StreamPolicy::Irix),
        ("macos", StreamPolicy::Macos),
    ];

    /// The policy called `name`, if any.
    pub fn by_name(name: &str) -> Option<StreamPolicy> {
        StreamPolicy::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, p)| p)
    }

    /// The configuration name.
    pub fn name(self) -> &'static str {
        StreamPolicy::NAMES
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("linux", |&(n, _)| n)
    }

    /// True if a new segment `[ns, ne)` wins over a held one `[hs, he)` where they
    /// overlap (stream offsets of the two segments as sent). Suricata's
    /// `DoHandleDataOverlap` table.
    pub fn new_wins(self, (ns, ne): (u64, u64), (hs, he): (u64, u64)) -> bool {
        use StreamPolicy::*;
        match self {
            Last => true,
            First => false,
            _ if ns == hs => match self {
                Linux => ne > he,
                OldLinux | Solaris | Hpux11 => ne >= he,
                _ => false,
            },
            _ if ns < hs => match self {
                Bsd | Hpux10 | Irix | Windows | Windows2k3 | OldLinux | Linux | Macos => true,
                Solaris | Hpux11 => ne >= he,
                _ => false,
            },
            _ => matches!(self, Solaris | Hpux11) && ne > he,
        }
    }
}

/// A stream policy name that is not one of [`StreamPolicy::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown policy {0:?} (one of: first, last, linux, old-linux, bsd, bsd-right, windows, windows2k3, vista, solaris, old-solaris, hpux10, hpux11, irix, macos)"
)]
pub struct UnknownStreamPolicy(pub String);

impl std::str::FromStr for StreamPolicy {
    type Err = UnknownStreamPolicy;

    fn from_str(s: &str) -> Result<StreamPolicy, UnknownStreamPolicy> {
        StreamPolicy::by_name(s).ok_or_else(|| UnknownStreamPolicy(s.to_string()))
    }
}
