//! Attaching and detaching the XDP program by rtnetlink (`RTM_SETLINK` with `IFLA_XDP`),
//! finding what is attached where, and removing every relayd attachment (`relayd
//! cleanup`).
//!
//! Why not a bpf_link (aya's `Xdp::attach`): a link lives as long as its file descriptor,
//! so a relayd killed with SIGKILL would take the program with it, and a fail-closed
//! relay would quietly become fail-open. An attachment made by rtnetlink belongs to the
//! interface: it outlives the process, the program keeps applying the failure policy in
//! its `config` map, and only an explicit detach (here, [`cleanup`], or `ip link set dev
//! IF xdp off`) removes it.
//!
//! relayd recognises its attachments by the program's name, `relayd_xdp`: it replaces
//! one left by an earlier relayd (atomically, `XDP_FLAGS_REPLACE` with the old program as
//! `IFLA_XDP_EXPECTED_FD`), and never touches another program. Everything here acts in
//! the calling thread's network namespace (the netlink socket is opened in it), and needs
//! CAP_NET_ADMIN, plus CAP_SYS_ADMIN to look programs up by id.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use relay_netlink::frame::{
    Attrs, Builder, Header, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR,
    NLMSG_HDRLEN, align, ne32_at, os_error,
};

use relay_netlink::RtnlSocket;

use crate::abi::PROGRAM_NAME;
use crate::error::XdpError;

/// `XDP_FLAGS_UPDATE_IF_NOEXIST`: fail (EBUSY) rather than replace an attached program.
const XDP_FLAGS_UPDATE_IF_NOEXIST: u32 = 1;
/// `XDP_FLAGS_SKB_MODE`: generic XDP.
pub(crate) const XDP_FLAGS_SKB_MODE: u32 = 2;
/// `XDP_FLAGS_DRV_MODE`: native XDP.
pub(crate) const XDP_FLAGS_DRV_MODE: u32 = 4;
/// `XDP_FLAGS_HW_MODE`: offloaded to the NIC.
const XDP_FLAGS_HW_MODE: u32 = 8;
/// `XDP_FLAGS_REPLACE`: act only if the attached program is `IFLA_XDP_EXPECTED_FD`'s.
const XDP_FLAGS_REPLACE: u32 = 16;

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_SETLINK: u16 = 19;
const IFLA_IFNAME: u16 = 3;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_FLAGS: u16 = 3;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;
const IFLA_XDP_EXPECTED_FD: u16 = 8;
const XDP_ATTACHED_DRV: u8 = 1;
const XDP_ATTACHED_SKB: u8 = 2;
const XDP_ATTACHED_HW: u8 = 3;
const XDP_ATTACHED_MULTI: u8 = 4;
const NLA_F_NESTED: u16 = 0x8000;
/// Header flag of an `NLMSG_ERROR`: the request was cut to its header (NETLINK_CAP_ACK).
const NLM_F_CAPPED: u16 = 0x100;
/// Header flag of an `NLMSG_ERROR`: extended-ack attributes follow.
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;
/// Bytes of `struct ifinfomsg`.
const IFINFOMSG_LEN: usize = 16;

/// An XDP program attached to an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedProgram {
    /// The program's kernel id.
    pub id: u32,
    /// Its name as the kernel knows it (at most 15 bytes; `relayd_xdp` for relayd's).
    pub name: String,
    /// How it is attached; `None` when offloaded to the NIC (relayd never attaches so).
    pub mode: Option<Mode>,
}

impl AttachedProgram {
    /// Whether this is relayd's program (this relayd's or an earlier one's).
    pub fn is_relayd(&self) -> bool {
        self.name == PROGRAM_NAME
    }
}

/// The XDP program attached to interface `ifindex`, if any.
pub fn attached(ifindex: u32) -> Result<Option<AttachedProgram>, XdpError> {
    let mut nl = Rtnl::open().map_err(|e| nl_err("opening rtnetlink", &ifindex.to_string(), e))?;
    let link = nl.get_link(ifindex)?;
    let Some((id, mode)) = link.current() else {
        return Ok(None);
    };
    match prog_by_id(id) {
        Ok((_, name)) => Ok(Some(AttachedProgram { id, name, mode })),
        // Detached between the two questions.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(bpf_err(id, &link.name, e)),
    }
}

/// Attaches the loaded program `prog` (kernel id `own_id`) to `ifindex` in `mode`.
///
/// Nothing attached: attaches (`XDP_FLAGS_UPDATE_IF_NOEXIST`, so a program attached in
/// the meantime is not replaced). `prog` itself in `mode`: nothing to do. Another
/// `relayd_xdp`: replaced atomically in the same mode; in the other mode (which the
/// kernel cannot replace across) it is detached first, so for a moment no program runs.
/// Another program: [`XdpError::Foreign`].
pub(crate) fn attach(
    ifindex: u32,
    prog: BorrowedFd<'_>,
    own_id: u32,
    mode: Mode,
) -> Result<(), XdpError> {
    let mut nl = Rtnl::open().map_err(|e| nl_err("opening rtnetlink", &ifindex.to_string(), e))?;
    let link = nl.get_link(ifindex)?;
    let what = format!("attaching {PROGRAM_NAME} in {} mode", mode.name());
    let fd = prog.as_raw_fd();
    let Some((id, old_mode)) = link.current() else {
        return nl
            .set_xdp(
                ifindex,
                fd,
                mode.flags() | XDP_FLAGS_UPDATE_IF_NOEXIST,
                None,
            )
            .map_err(|e| set_err(&what, &link.name, ifindex, e));
    };
    if id == own_id && old_mode == Some(mode) {
        return Ok(());
    }
    let (old, name) = prog_by_id(id).map_err(|e| bpf_err(id, &link.name, e))?;
    if name != PROGRAM_NAME {
        return Err(XdpError::Foreign {
            ifname: link.name,
            name,
            id,
        });
    }
    if old_mode == Some(mode) {
        nl.set_xdp(
            ifindex,
            fd,
            mode.flags() | XDP_FLAGS_REPLACE,
            Some(old.as_raw_fd()),
        )
        .map_err(|e| set_err(&what, &link.name, ifindex, e))?;
    } else {
        let detach = format!("detaching {PROGRAM_NAME} id {id} (to change its mode)");
        nl.set_xdp(
            ifindex,
            -1,
            mode_flags(old_mode) | XDP_FLAGS_REPLACE,
            Some(old.as_raw_fd()),
        )
        .map_err(|e| set_err(&detach, &link.name, ifindex, e))?;
        nl.set_xdp(
            ifindex,
            fd,
            mode.flags() | XDP_FLAGS_UPDATE_IF_NOEXIST,
            None,
        )
        .map_err(|e| set_err(&what, &link.name, ifindex, e))?;
    }
    if id != own_id {
        tracing::info!(
            "{}: replaced {PROGRAM_NAME} id {id} left by an earlier relayd",
            link.name
        );
    }
    Ok(())
}

/// Detaches `relayd_xdp` from `ifindex`: `true` if it was attached and is now gone,
/// `false` if it was not attached (nothing, or another program, which stays; a warning
/// is logged for that).
pub fn detach(ifindex: u32) -> Result<bool, XdpError> {
    let mut nl = Rtnl::open().map_err(|e| nl_err("opening rtnetlink", &ifindex.to_string(), e))?;
    let link = nl.get_link(ifindex)?;
    detach_link(&mut nl, &link)
}

fn detach_link(nl: &mut Rtnl, link: &Link) -> Result<bool, XdpError> {
    let Some((id, mode)) = link.current() else {
        return Ok(false);
    };
    let (fd, name) = match prog_by_id(id) {
        Ok(p) => p,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(false),
        Err(e) => return Err(bpf_err(id, &link.name, e)),
    };
    if name != PROGRAM_NAME {
        tracing::warn!(
            "{}: not detaching XDP program {name} (id {id}): it is not relayd's",
            link.name
        );
        return Ok(false);
    }
    // REPLACE with the program just looked up: if another took its place meanwhile, the
    // kernel refuses (EEXIST) instead of detaching that one.
    nl.set_xdp(
        link.ifindex,
        -1,
        mode_flags(mode) | XDP_FLAGS_REPLACE,
        Some(fd.as_raw_fd()),
    )
    .map_err(|e| {
        set_err(
            &format!("detaching {PROGRAM_NAME} id {id}"),
            &link.name,
            link.ifindex,
            e,
        )
    })?;
    Ok(true)
}

/// Detaches `relayd_xdp` from every interface of the calling thread's network namespace
/// that has it, and returns their names. Other programs stay. On an error the remaining
/// interfaces are still tried, and the first error is returned.
pub fn cleanup() -> Result<Vec<String>, XdpError> {
    let mut nl = Rtnl::open().map_err(|e| nl_err("opening rtnetlink", "all interfaces", e))?;
    let links = nl
        .dump_links()
        .map_err(|e| nl_err("listing interfaces", "all interfaces", e))?;
    let mut done = Vec::new();
    let mut first_err = None;
    for link in links.iter().filter(|l| l.current().is_some()) {
        match detach_link(&mut nl, link) {
            Ok(true) => done.push(link.name.clone()),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!("cleanup: {e}");
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(done),
    }
}

fn mode_flags(mode: Option<Mode>) -> u32 {
    mode.map_or(XDP_FLAGS_HW_MODE, Mode::flags)
}

/// An rtnetlink failure before any XDP request (opening, listing).
fn nl_err(what: &str, ifname: &str, e: NlError) -> XdpError {
    kernel_err(what, ifname, e, "")
}

fn kernel_err(what: &str, ifname: &str, e: NlError, hint: &'static str) -> XdpError {
    if e.io.raw_os_error() == Some(libc::EPERM) {
        return XdpError::Permission {
            what: format!("{what} on {ifname}"),
        };
    }
    XdpError::Kernel {
        what: what.to_owned(),
        ifname: ifname.to_owned(),
        source: e.io,
        kernel: e.msg,
        hint,
    }
}

/// An `RTM_SETLINK` (attach or detach) failure, with what the errno usually means.
fn set_err(what: &str, ifname: &str, ifindex: u32, e: NlError) -> XdpError {
    let hint = match e.io.raw_os_error() {
        Some(libc::ENODEV) => return XdpError::NoSuchInterface { ifindex },
        Some(libc::EOPNOTSUPP) => {
            "; the driver has no native XDP: use generic mode (slower) on this interface"
        }
        Some(libc::EBUSY) => {
            "; another XDP program is attached, perhaps through a bpf_link (which `ip link \
             set xdp off` cannot remove; its owner must close it)"
        }
        Some(libc::EEXIST) => {
            "; the attached program changed meanwhile, or one runs in the other mode \
             (native and generic cannot be active together): check `ip -d link show`"
        }
        Some(libc::ERANGE) => {
            "; native XDP on veth needs the peer's MTU at most about 3.5 KB (the program \
             does not take multi-buffer frames): lower the peer's MTU"
        }
        Some(libc::ENOSPC) => {
            "; native XDP on veth needs at least as many rx queues here as tx queues on the \
             peer (create the pair with numrxqueues/numtxqueues)"
        }
        _ => "",
    };
    kernel_err(what, ifname, e, hint)
}

/// A bpf(2) failure while looking up program `id`.
fn bpf_err(id: u32, ifname: &str, e: io::Error) -> XdpError {
    kernel_err(
        &format!("looking up the XDP program with id {id}"),
        ifname,
        NlError { io: e, msg: None },
        "",
    )
}

/// A failed rtnetlink request: the errno and the kernel's extended-ack message.
#[derive(Debug)]
struct NlError {
    io: io::Error,
    msg: Option<String>,
}

impl From<io::Error> for NlError {
    fn from(io: io::Error) -> NlError {
        NlError { io, msg: None }
    }
}

/// What an interface reports about XDP (`IFLA_XDP`), with its name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Link {
    ifindex: u32,
    name: String,
    attached: u8,
    prog_id: u32,
    drv_id: u32,
    skb_id: u32,
    hw_id: u32,
}

impl Link {
    /// The program attached and its mode. With several (one offloaded and one not,
    /// `XDP_ATTACHED_MULTI`), the one in the driver or the stack, which is relayd's
    /// concern.
    fn current(&self) -> Option<(u32, Option<Mode>)> {
        let one = |id: u32| match (id, self.prog_id) {
            (0, 0) => None,
            (0, p) => Some(p),
            (id, _) => Some(id),
        };
        match self.attached {
            XDP_ATTACHED_DRV => Some((one(self.drv_id)?, Some(Mode::Native))),
            XDP_ATTACHED_SKB => Some((one(self.skb_id)?, Some(Mode::Generic))),
            XDP_ATTACHED_HW => Some((one(self.hw_id)?, None)),
            XDP_ATTACHED_MULTI => {
                if self.drv_id != 0 {
                    Some((self.drv_id, Some(Mode::Native)))
                } else if self.skb_id != 0 {
                    Some((self.skb_id, Some(Mode::Generic)))
                } else if self.hw_id != 0 {
                    Some((self.hw_id, None))
                } else {
                    None
                }
            }
            _ => None,
        }
    }
}

/// Parses an `RTM_NEWLINK` body (`struct ifinfomsg` and attributes).
fn parse_link(body: &[u8]) -> Option<Link> {
    let mut link = Link {
        ifindex: ne32_at(body, 4)?,
        ..Link::default()
    };
    for a in Attrs::new(body.get(IFINFOMSG_LEN..)?) {
        match a.ty {
            IFLA_IFNAME => {
                let name = a.data.split(|b| *b == 0).next().unwrap_or_default();
                link.name = String::from_utf8_lossy(name).into_owned();
            }
            IFLA_XDP => {
                for x in Attrs::new(a.data) {
                    match x.ty {
                        IFLA_XDP_ATTACHED => link.attached = *x.data.first()?,
                        IFLA_XDP_PROG_ID => link.prog_id = x.ne32_at(0)?,
                        IFLA_XDP_DRV_PROG_ID => link.drv_id = x.ne32_at(0)?,
                        IFLA_XDP_SKB_PROG_ID => link.skb_id = x.ne32_at(0)?,
                        IFLA_XDP_HW_PROG_ID => link.hw_id = x.ne32_at(0)?,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if link.name.is_empty() {
        link.name = format!("ifindex {}", link.ifindex);
    }
    Some(link)
}

/// The kernel's extended-ack message in an `NLMSG_ERROR` (`NLMSGERR_ATTR_MSG`), if any.
fn ext_ack_msg(header: &Header, payload: &[u8]) -> Option<String> {
    if header.flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    let orig = Header::parse(payload.get(4..)?)?;
    let skip = if header.flags & NLM_F_CAPPED != 0 {
        NLMSG_HDRLEN
    } else {
        align(orig.len as usize)
    };
    let tlvs = payload.get(4usize.checked_add(skip)?..)?;
    let a = Attrs::new(tlvs).find(|a| a.ty == NLMSGERR_ATTR_MSG)?;
    let msg = a.data.split(|b| *b == 0).next().unwrap_or_default();
    Some(String::from_utf8_lossy(msg).into_owned())
}

/// A NETLINK_ROUTE socket (relay_netlink's) for the few link requests above (setup
/// paths, not per packet).
struct Rtnl {
    sock: RtnlSocket,
}

impl Rtnl {
    fn open() -> Result<Rtnl, NlError> {
        Ok(Rtnl {
            sock: RtnlSocket::open()?,
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.sock.next_seq()
    }

    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        self.sock.send(msg)
    }

    fn recv_until<T>(
        &mut self,
        seq: u32,
        f: impl FnMut(&Header, &[u8]) -> Option<Result<T, NlError>>,
    ) -> Result<T, NlError> {
        self.sock.recv_until(seq, f)
    }

    /// `RTM_GETLINK` for one interface.
    fn get_link(&mut self, ifindex: u32) -> Result<Link, XdpError> {
        let seq = self.next_seq();
        let mut ifi = [0u8; IFINFOMSG_LEN];
        ifi[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        let mut b = Builder::new(RTM_GETLINK, NLM_F_REQUEST, seq);
        b.push(&ifi);
        let what = "reading the XDP state";
        let name = format!("ifindex {ifindex}");
        self.send(b.finish())
            .map_err(|e| nl_err(what, &name, e.into()))?;
        self.recv_until(seq, |h, payload| match h.ty {
            RTM_NEWLINK => Some(parse_link(payload).ok_or_else(|| {
                NlError::from(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "malformed RTM_NEWLINK",
                ))
            })),
            NLMSG_ERROR => ack(h, payload),
            _ => None,
        })
        .map_err(|e| match e.io.raw_os_error() {
            Some(libc::ENODEV) => XdpError::NoSuchInterface { ifindex },
            _ => nl_err(what, &name, e),
        })
    }

    /// Every interface of the namespace (`RTM_GETLINK` dump).
    fn dump_links(&mut self) -> Result<Vec<Link>, NlError> {
        let seq = self.next_seq();
        let mut b = Builder::new(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, seq);
        b.push(&[0u8; IFINFOMSG_LEN]);
        self.send(b.finish())?;
        let mut links = Vec::new();
        self.recv_until(seq, |h, payload| match h.ty {
            RTM_NEWLINK => {
                links.extend(parse_link(payload));
                None
            }
            NLMSG_DONE => Some(Ok(())),
            NLMSG_ERROR => ack(h, payload),
            _ => None,
        })?;
        Ok(links)
    }

    /// `RTM_SETLINK` with `IFLA_XDP`: attaches program `fd` (or detaches, with -1) with
    /// `flags`, and `IFLA_XDP_EXPECTED_FD` when replacing.
    fn set_xdp(
        &mut self,
        ifindex: u32,
        fd: RawFd,
        flags: u32,
        expected: Option<RawFd>,
    ) -> Result<(), NlError> {
        let seq = self.next_seq();
        let mut ifi = [0u8; IFINFOMSG_LEN];
        ifi[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        let mut xdp = Vec::with_capacity(24);
        relay_netlink::frame::put_attr(&mut xdp, IFLA_XDP_FD, &fd.to_ne_bytes());
        relay_netlink::frame::put_attr(&mut xdp, IFLA_XDP_FLAGS, &flags.to_ne_bytes());
        if let Some(e) = expected {
            relay_netlink::frame::put_attr(&mut xdp, IFLA_XDP_EXPECTED_FD, &e.to_ne_bytes());
        }
        let mut b = Builder::new(RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK, seq);
        b.push(&ifi).attr(IFLA_XDP | NLA_F_NESTED, &xdp);
        self.send(b.finish())?;
        self.recv_until(seq, |h, payload| match h.ty {
            NLMSG_ERROR => ack(h, payload),
            _ => None,
        })
    }
}

/// An `NLMSG_ERROR`: `Ok` for an acknowledgement, the error (with the kernel's message)
/// otherwise.
fn ack<T: Default>(h: &Header, payload: &[u8]) -> Option<Result<T, NlError>> {
    let code = i32::from_ne_bytes(payload.get(..4)?.try_into().ok()?);
    if code == 0 {
        return Some(Ok(T::default()));
    }
    Some(Err(NlError {
        io: os_error(code),
        msg: ext_ack_msg(h, payload),
    }))
}

/// The program with kernel id `id`: an fd on it, and its name (bpf(2)
/// `BPF_PROG_GET_FD_BY_ID` and `BPF_OBJ_GET_INFO_BY_FD`).
fn prog_by_id(id: u32) -> io::Result<(OwnedFd, String)> {
    const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    // union bpf_attr, zeroed beyond the fields used (the kernel checks that).
    let mut attr = [0u64; 16];
    attr[0] = u64::from(id); // prog_id (u32), next_id (u32) = 0
    // SAFETY: attr is a live, zeroed buffer of the size given; the kernel reads it only.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_GET_FD_BY_ID,
            attr.as_mut_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    // struct bpf_prog_info up to and including `name` (char[16] at offset 64).
    let mut info = [0u64; 10];
    let mut attr = [0u64; 16];
    attr[0] = u64::from(fd.as_raw_fd() as u32) | ((std::mem::size_of_val(&info) as u64) << 32);
    attr[1] = info.as_mut_ptr() as u64;
    // SAFETY: attr is live and zeroed beyond bpf_fd, info_len and info; info is a live
    // writable buffer of the info_len given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            attr.as_mut_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut name = [0u8; 16];
    for (i, w) in info[8..10].iter().enumerate() {
        name[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
    }
    let name = CStr::from_bytes_until_nul(&name)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(&name).into_owned());
    Ok((fd, name))
}

/// Whether the program runs in the driver or in the kernel's generic path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// In the driver, before an skb exists (`XDP_FLAGS_DRV_MODE`, `ip link set xdpdrv`):
    /// the fast one, on drivers that support it (veth does).
    Native,
    /// After the skb is built (`XDP_FLAGS_SKB_MODE`, `xdpgeneric`): works on every
    /// interface, slower; for drivers without native XDP.
    Generic,
}

impl Mode {
    /// The `XDP_FLAGS_*` bit of this mode.
    pub(crate) fn flags(self) -> u32 {
        match self {
            Mode::Native => XDP_FLAGS_DRV_MODE,
            Mode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }

    /// "native" or "generic", for messages.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Generic => "generic",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_netlink::frame::put_attr;

    fn link_body(ifindex: u32, name: &[u8], xdp: &[(u16, &[u8])]) -> Vec<u8> {
        let mut b = vec![0u8; IFINFOMSG_LEN];
        b[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        put_attr(&mut b, IFLA_IFNAME, name);
        let mut nested = Vec::new();
        for (ty, data) in xdp {
            put_attr(&mut nested, *ty, data);
        }
        put_attr(&mut b, IFLA_XDP | NLA_F_NESTED, &nested);
        b
    }

    #[test]
    fn link_reports_the_program_and_its_mode() {
        let id = 77u32.to_ne_bytes();
        let b = link_body(
            5,
            b"eth0\0",
            &[
                (IFLA_XDP_ATTACHED, &[XDP_ATTACHED_DRV]),
                (IFLA_XDP_PROG_ID, &id),
                (IFLA_XDP_DRV_PROG_ID, &id),
            ],
        );
        let l = parse_link(&b).unwrap();
        assert_eq!((l.ifindex, l.name.as_str()), (5, "eth0"));
        assert_eq!(l.current(), Some((77, Some(Mode::Native))));

        let b = link_body(6, b"eth1\0", &[(IFLA_XDP_ATTACHED, &[0])]);
        assert_eq!(parse_link(&b).unwrap().current(), None);

        // Generic mode, reported with only IFLA_XDP_PROG_ID (older kernels).
        let b = link_body(
            7,
            b"eth2\0",
            &[
                (IFLA_XDP_ATTACHED, &[XDP_ATTACHED_SKB]),
                (IFLA_XDP_PROG_ID, &id),
            ],
        );
        assert_eq!(
            parse_link(&b).unwrap().current(),
            Some((77, Some(Mode::Generic)))
        );

        // Offloaded plus native: the native one is relayd's concern.
        let b = link_body(
            8,
            b"eth3\0",
            &[
                (IFLA_XDP_ATTACHED, &[XDP_ATTACHED_MULTI]),
                (IFLA_XDP_HW_PROG_ID, &9u32.to_ne_bytes()),
                (IFLA_XDP_DRV_PROG_ID, &id),
            ],
        );
        assert_eq!(
            parse_link(&b).unwrap().current(),
            Some((77, Some(Mode::Native)))
        );
    }

    #[test]
    fn damaged_link_messages_do_not_panic() {
        let b = link_body(
            5,
            b"eth0\0",
            &[
                (IFLA_XDP_ATTACHED, &[XDP_ATTACHED_DRV]),
                (IFLA_XDP_PROG_ID, &[1, 2, 3, 4]),
            ],
        );
        for n in 0..b.len() {
            let _ = parse_link(&b[..n]).map(|l| l.current());
        }
        assert!(parse_link(&b[..3]).is_none());
    }

    #[test]
    fn extended_ack_message_is_read() {
        // NLMSG_ERROR, capped: error, the request's header, then NLMSGERR_ATTR_MSG.
        let mut payload = (-libc::ERANGE).to_ne_bytes().to_vec();
        let req = Header {
            len: 60,
            ty: RTM_SETLINK,
            flags: 5,
            seq: 1,
            pid: 0,
        };
        payload.extend_from_slice(&req.to_bytes());
        put_attr(
            &mut payload,
            NLMSGERR_ATTR_MSG,
            b"Peer MTU is too large to set XDP\0",
        );
        let h = Header {
            len: 0,
            ty: NLMSG_ERROR,
            flags: NLM_F_CAPPED | NLM_F_ACK_TLVS,
            seq: 1,
            pid: 0,
        };
        let r: Result<(), NlError> = ack(&h, &payload).unwrap();
        let e = r.unwrap_err();
        assert_eq!(e.io.raw_os_error(), Some(libc::ERANGE));
        assert_eq!(e.msg.as_deref(), Some("Peer MTU is too large to set XDP"));
        let h = Header { flags: 0, ..h };
        assert_eq!(ext_ack_msg(&h, &payload), None, "no TLVs flagged");
        for n in 0..payload.len() {
            let _ = ext_ack_msg(
                &Header {
                    flags: NLM_F_ACK_TLVS,
                    ..h
                },
                &payload[..n],
            );
        }
    }
}
