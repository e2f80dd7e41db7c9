//! SOCKS5 (RFC 1928) CONNECT with optional user/password authentication (RFC 1929), for
//! clients configured with a proxy. BIND and UDP ASSOCIATE are refused with reply 7; a
//! destination the listener's policy ([`crate::policy`]) refuses gets reply 2.
//!
//! The handshake is generic over the stream so the unit tests below run whole exchanges
//! in memory; the listener then relays the connection with the same core as the
//! transparent mode.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::ProxyError;
use crate::config::{Socks5Config, Socks5User};
use crate::policy::{DestPolicy, LogLimit, Refusal};
use crate::relay::relay;
use crate::server::{self, ConnCtx, ProxyHandle};
use crate::sock;
use crate::stats::Stats;

/// How long a client may take to finish the SOCKS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// RFC 1928 section 3 and 6 constants.
mod wire {
    pub(super) const VERSION: u8 = 5;
    pub(super) const METHOD_NONE: u8 = 0x00;
    pub(super) const METHOD_USERPASS: u8 = 0x02;
    pub(super) const METHOD_NO_ACCEPTABLE: u8 = 0xff;
    pub(super) const CMD_CONNECT: u8 = 1;
    pub(super) const ATYP_V4: u8 = 1;
    pub(super) const ATYP_DOMAIN: u8 = 3;
    pub(super) const ATYP_V6: u8 = 4;
    /// RFC 1929: sub-negotiation version.
    pub(super) const AUTH_VERSION: u8 = 1;
}

/// Reply codes (RFC 1928 section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Reply {
    Succeeded = 0,
    GeneralFailure = 1,
    /// "Connection not allowed by ruleset": the destination policy refused it.
    NotAllowed = 2,
    NetworkUnreachable = 3,
    HostUnreachable = 4,
    ConnectionRefused = 5,
    CommandNotSupported = 7,
    AddressTypeNotSupported = 8,
}

impl Reply {
    /// The reply for a failed upstream connect.
    pub(crate) fn for_error(e: &io::Error) -> Reply {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => return Reply::ConnectionRefused,
            io::ErrorKind::NetworkUnreachable => return Reply::NetworkUnreachable,
            io::ErrorKind::HostUnreachable | io::ErrorKind::TimedOut => {
                return Reply::HostUnreachable;
            }
            _ => {}
        }
        match e.raw_os_error() {
            Some(libc::ENETUNREACH) => Reply::NetworkUnreachable,
            Some(libc::EHOSTUNREACH) | Some(libc::ETIMEDOUT) => Reply::HostUnreachable,
            Some(libc::ECONNREFUSED) => Reply::ConnectionRefused,
            _ => Reply::GeneralFailure,
        }
    }
}

/// Where the client asked to go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// An IPv4 or IPv6 address.
    Addr(SocketAddr),
    /// A name for the proxy to resolve (`socks5h://`, `--socks5-hostname`).
    Domain(String, u16),
}

/// Why a handshake ended without a target; any reply owed has been sent.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    Io(io::Error),
    /// Not SOCKS5, or no acceptable method, or a bad command / address type.
    Rejected(&'static str),
    AuthFailed,
}

impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        HandshakeError::Io(e)
    }
}

/// Runs the server side of the handshake up to (not including) the CONNECT reply.
pub(crate) async fn handshake<S>(s: &mut S, users: &[Socks5User]) -> Result<Target, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = [0u8; 2];
    s.read_exact(&mut head).await?;
    if head[0] != wire::VERSION {
        return Err(HandshakeError::Rejected("not SOCKS version 5"));
    }
    let mut methods = vec![0u8; usize::from(head[1])];
    s.read_exact(&mut methods).await?;
    let wanted = if users.is_empty() {
        wire::METHOD_NONE
    } else {
        wire::METHOD_USERPASS
    };
    if !methods.contains(&wanted) {
        s.write_all(&[wire::VERSION, wire::METHOD_NO_ACCEPTABLE])
            .await?;
        return Err(HandshakeError::Rejected(
            "no acceptable authentication method",
        ));
    }
    s.write_all(&[wire::VERSION, wanted]).await?;
    if wanted == wire::METHOD_USERPASS {
        authenticate(s, users).await?;
    }
    let mut req = [0u8; 4];
    s.read_exact(&mut req).await?;
    let [ver, cmd, _rsv, atyp] = req;
    if ver != wire::VERSION {
        return Err(HandshakeError::Rejected("request is not SOCKS version 5"));
    }
    let target = match atyp {
        wire::ATYP_V4 => {
            let mut b = [0u8; 4];
            s.read_exact(&mut b).await?;
            Target::Addr(SocketAddr::new(
                Ipv4Addr::from(b).into(),
                s.read_u16().await?,
            ))
        }
        wire::ATYP_V6 => {
            let mut b = [0u8; 16];
            s.read_exact(&mut b).await?;
            Target::Addr(SocketAddr::new(
                Ipv6Addr::from(b).into(),
                s.read_u16().await?,
            ))
        }
        wire::ATYP_DOMAIN => {
            let mut name = vec![0u8; usize::from(s.read_u8().await?)];
            s.read_exact(&mut name).await?;
            let port = s.read_u16().await?;
            match String::from_utf8(name) {
                Ok(n) if !n.is_empty() => Target::Domain(n, port),
                _ => {
                    send_reply(s, Reply::HostUnreachable, None).await?;
                    return Err(HandshakeError::Rejected("domain name is not UTF-8"));
                }
            }
        }
        _ => {
            send_reply(s, Reply::AddressTypeNotSupported, None).await?;
            return Err(HandshakeError::Rejected("address type not supported"));
        }
    };
    if cmd != wire::CMD_CONNECT {
        send_reply(s, Reply::CommandNotSupported, None).await?;
        return Err(HandshakeError::Rejected(
            "command not supported (only CONNECT)",
        ));
    }
    Ok(target)
}

/// RFC 1929 sub-negotiation; on failure the failure status has been sent.
async fn authenticate<S>(s: &mut S, users: &[Socks5User]) -> Result<(), HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let ver = s.read_u8().await?;
    let mut name = vec![0u8; usize::from(s.read_u8().await?)];
    s.read_exact(&mut name).await?;
    let mut pass = vec![0u8; usize::from(s.read_u8().await?)];
    s.read_exact(&mut pass).await?;
    let ok = ver == wire::AUTH_VERSION
        && users
            .iter()
            .any(|u| u.username.as_bytes() == name && ct_eq(u.password.as_bytes(), &pass));
    s.write_all(&[wire::AUTH_VERSION, if ok { 0 } else { 1 }])
        .await?;
    if ok {
        Ok(())
    } else {
        Err(HandshakeError::AuthFailed)
    }
}

/// Compares without an early exit on the first differing byte, so response time does
/// not tell how much of a guessed password was right.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Sends a reply with `bound` (or 0.0.0.0:0) as BND.ADDR/BND.PORT.
pub(crate) async fn send_reply<S>(
    s: &mut S,
    rep: Reply,
    bound: Option<SocketAddr>,
) -> io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    let bound = bound
        .map(sock::unmap)
        .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut out = Vec::with_capacity(22);
    out.extend_from_slice(&[wire::VERSION, rep as u8, 0]);
    match bound {
        SocketAddr::V4(a) => {
            out.push(wire::ATYP_V4);
            out.extend_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            out.push(wire::ATYP_V6);
            out.extend_from_slice(&a.ip().octets());
        }
    }
    out.extend_from_slice(&bound.port().to_be_bytes());
    s.write_all(&out).await
}

/// A bound SOCKS5 listener, not yet accepting.
#[derive(Debug)]
pub struct Socks5Proxy {
    cfg: Socks5Config,
    listener: tokio::net::TcpListener,
    policy: Arc<DestPolicy>,
}

impl Socks5Proxy {
    /// Checks the configuration, reads the relay's interface addresses for the
    /// destination policy and binds the listener, all in the calling thread's network
    /// namespace. Must run inside a tokio runtime.
    pub fn bind(cfg: Socks5Config) -> Result<Socks5Proxy, ProxyError> {
        cfg.check()?;
        let policy = DestPolicy::new(
            cfg.allow.clone(),
            cfg.deny.clone(),
            cfg.options.upstream_mark,
        )
        .map_err(ProxyError::LocalAddresses)?;
        let listener = sock::listener(cfg.listen, false).map_err(|source| ProxyError::Bind {
            what: "socks5",
            addr: cfg.listen,
            source,
        })?;
        Ok(Socks5Proxy {
            cfg,
            listener,
            policy: Arc::new(policy),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Starts accepting on the current tokio runtime.
    pub fn spawn(self) -> Result<ProxyHandle, ProxyError> {
        let listen = self.cfg.listen;
        let users: Arc<[Socks5User]> = self.cfg.users.into();
        let policy = Arc::clone(&self.policy);
        let log = Arc::new(LogLimit::default());
        let mut handle =
            server::spawn(self.listener, self.cfg.options, move |client, peer, ctx| {
                let conn = Conn {
                    users: Arc::clone(&users),
                    policy: Arc::clone(&policy),
                    log: Arc::clone(&log),
                };
                serve(client, peer, ctx, conn)
            })
            .map_err(|source| ProxyError::Bind {
                what: "socks5",
                addr: listen,
                source,
            })?;
        handle.policy = Some(self.policy);
        Ok(handle)
    }
}

/// What a SOCKS5 connection task shares with its listener.
struct Conn {
    users: Arc<[Socks5User]>,
    policy: Arc<DestPolicy>,
    /// Rate limit of the "refused by the policy" warning.
    log: Arc<LogLimit>,
}

async fn serve(mut client: TcpStream, peer: SocketAddr, ctx: ConnCtx, conn: Conn) {
    let users = &conn.users;
    let stats: &Stats = &ctx.stats;
    let target = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&mut client, users)).await
    {
        Ok(Ok(t)) => t,
        Ok(Err(HandshakeError::AuthFailed)) => {
            tracing::debug!(%peer, "SOCKS5 authentication failed");
            Stats::inc(&stats.socks_auth_failed);
            return;
        }
        Ok(Err(HandshakeError::Rejected(why))) => {
            tracing::debug!(%peer, why, "SOCKS5 request rejected");
            Stats::inc(&stats.socks_rejected);
            return;
        }
        Ok(Err(HandshakeError::Io(e))) => {
            tracing::debug!(%peer, error = %e, "SOCKS5 handshake cut short");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "SOCKS5 handshake timed out");
            return;
        }
    };
    if let Err(e) = sock::tune_accepted(&client, &ctx.opts) {
        tracing::debug!(error = %e, "tuning accepted socket");
    }
    let server = match connect_target(&target, &ctx, &conn.policy).await {
        Ok(s) => s,
        Err(ConnectFailure::Refused(dst, why)) => {
            Stats::inc(&stats.refused_policy);
            if let Some(suppressed) = conn.log.ready() {
                tracing::warn!(
                    %peer,
                    ?target,
                    %dst,
                    reason = %why,
                    suppressed,
                    "SOCKS5 CONNECT refused by the destination policy"
                );
            }
            let _ = send_reply(&mut client, Reply::NotAllowed, None).await;
            return;
        }
        Err(ConnectFailure::Io(e)) => {
            tracing::debug!(%peer, ?target, error = %e, "upstream connect failed");
            Stats::inc(&stats.upstream_failed);
            let _ = send_reply(&mut client, Reply::for_error(&e), None).await;
            return;
        }
    };
    if send_reply(&mut client, Reply::Succeeded, server.local_addr().ok())
        .await
        .is_err()
    {
        return;
    }
    relay(client, server, ctx.relay_params(), stats, ctx.abort.clone()).await;
}

/// Why no upstream connection was made.
#[derive(Debug)]
enum ConnectFailure {
    /// The policy refused every address there was (this one first); none was tried.
    Refused(SocketAddr, Refusal),
    /// Resolution failed, or the last address tried failed.
    Io(io::Error),
}

/// Connects to the target, trying each resolved address of a name in turn. The policy
/// is checked on every address before it is tried, so a name that resolves to a refused
/// address (`localhost`) is refused like the address itself; allowed addresses of the
/// same name are still tried.
async fn connect_target(
    target: &Target,
    ctx: &ConnCtx,
    policy: &DestPolicy,
) -> Result<TcpStream, ConnectFailure> {
    let addrs: Vec<SocketAddr> = match target {
        Target::Addr(a) => vec![*a],
        Target::Domain(name, port) => tokio::net::lookup_host((name.as_str(), *port))
            .await
            .map_err(|e| ConnectFailure::Io(io::Error::new(io::ErrorKind::HostUnreachable, e)))?
            .collect(),
    };
    let mut refused = None;
    let mut last = None;
    for a in addrs {
        if let Err(why) = policy.check(a) {
            refused.get_or_insert((a, why));
            continue;
        }
        match sock::connect_upstream(a, None, &ctx.opts, &ctx.stats).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(match (last, refused) {
        (Some(e), _) => ConnectFailure::Io(e),
        (None, Some((a, why))) => ConnectFailure::Refused(a, why),
        (None, None) => ConnectFailure::Io(io::Error::new(
            io::ErrorKind::HostUnreachable,
            "name has no address",
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> Vec<Socks5User> {
        vec![Socks5User {
            username: "alice".into(),
            password: "secret".into(),
        }]
    }

    /// Runs the handshake against `client_bytes`; returns its result and what it sent.
    async fn exchange(
        client_bytes: &[u8],
        users: &[Socks5User],
    ) -> (Result<Target, HandshakeError>, Vec<u8>) {
        let (mut cli, mut srv) = tokio::io::duplex(1024);
        cli.write_all(client_bytes).await.unwrap();
        let res = handshake(&mut srv, users).await;
        drop(srv);
        let mut sent = Vec::new();
        cli.read_to_end(&mut sent).await.unwrap();
        (res, sent)
    }

    #[tokio::test]
    async fn connect_ipv4_without_auth() {
        let (r, sent) = exchange(&[5, 1, 0, 5, 1, 0, 1, 10, 0, 2, 2, 0, 80], &[]).await;
        assert_eq!(r.unwrap(), Target::Addr("10.0.2.2:80".parse().unwrap()));
        assert_eq!(sent, [5, 0]);
    }

    #[tokio::test]
    async fn connect_ipv6_and_domain() {
        let mut req = vec![5, 2, 0, 2, 5, 1, 0, 4];
        req.extend_from_slice(&"fd00:2::2".parse::<Ipv6Addr>().unwrap().octets());
        req.extend_from_slice(&443u16.to_be_bytes());
        let (r, _) = exchange(&req, &[]).await;
        assert_eq!(r.unwrap(), Target::Addr("[fd00:2::2]:443".parse().unwrap()));
        let mut req = vec![5, 1, 0, 5, 1, 0, 3, 11];
        req.extend_from_slice(b"example.org");
        req.extend_from_slice(&8080u16.to_be_bytes());
        let (r, _) = exchange(&req, &[]).await;
        assert_eq!(r.unwrap(), Target::Domain("example.org".into(), 8080));
    }

    #[tokio::test]
    async fn user_password() {
        let mut ok = vec![5, 1, 2, 1, 5];
        ok.extend_from_slice(b"alice");
        ok.push(6);
        ok.extend_from_slice(b"secret");
        ok.extend_from_slice(&[5, 1, 0, 1, 10, 0, 2, 2, 0, 80]);
        let (r, sent) = exchange(&ok, &user()).await;
        assert!(r.is_ok());
        assert_eq!(sent, [5, 2, 1, 0]);

        let mut bad = vec![5, 1, 2, 1, 5];
        bad.extend_from_slice(b"alice");
        bad.push(6);
        bad.extend_from_slice(b"secreT");
        let (r, sent) = exchange(&bad, &user()).await;
        assert!(matches!(r, Err(HandshakeError::AuthFailed)));
        assert_eq!(sent, [5, 2, 1, 1]);

        // No-auth offered only, but users are configured: no acceptable method.
        let (r, sent) = exchange(&[5, 1, 0], &user()).await;
        assert!(matches!(r, Err(HandshakeError::Rejected(_))));
        assert_eq!(sent, [5, 0xff]);
    }

    #[tokio::test]
    async fn bind_udp_and_bad_atyp_are_refused() {
        for cmd in [2u8, 3] {
            let (r, sent) = exchange(&[5, 1, 0, 5, cmd, 0, 1, 10, 0, 2, 2, 0, 80], &[]).await;
            assert!(matches!(r, Err(HandshakeError::Rejected(_))));
            assert_eq!(sent, [5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0]);
        }
        let (r, sent) = exchange(&[5, 1, 0, 5, 1, 0, 9], &[]).await;
        assert!(matches!(r, Err(HandshakeError::Rejected(_))));
        assert_eq!(sent, [5, 0, 5, 8, 0, 1, 0, 0, 0, 0, 0, 0]);
        let (r, _) = exchange(&[4, 1, 0, 80], &[]).await;
        assert!(matches!(r, Err(HandshakeError::Rejected(_))));
    }

    #[test]
    fn reply_codes_for_connect_errors() {
        let e = |c| io::Error::from_raw_os_error(c);
        assert_eq!(
            Reply::for_error(&e(libc::ECONNREFUSED)),
            Reply::ConnectionRefused
        );
        assert_eq!(
            Reply::for_error(&e(libc::EHOSTUNREACH)),
            Reply::HostUnreachable
        );
        assert_eq!(
            Reply::for_error(&e(libc::ENETUNREACH)),
            Reply::NetworkUnreachable
        );
        assert_eq!(
            Reply::for_error(&e(libc::ETIMEDOUT)),
            Reply::HostUnreachable
        );
        assert_eq!(Reply::for_error(&e(libc::EACCES)), Reply::GeneralFailure);
    }
}
