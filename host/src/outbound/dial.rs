//! Connections the host opens for others: the name looked up on the host's
//! resolver, every address it resolves to checked by the [`AddressPolicy`],
//! the connection made to the address checked, then TLS with the system's
//! roots. Plugins' outbound HTTP and Handlers' module pulls connect through
//! the same [`Dialer`], so an address refused to one is refused to the other.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;

use super::{AddressPolicy, Forbidden, Host, IpNet, LOOKUPS_IN_FLIGHT, ResolveError, Resolver, Scheme, Target};

/// Opens connections under the host's address policy, with the networks it
/// was given opened (a plugin's grant's, or the tenant policy's for pulls).
/// Cheap to clone: clones share the policy, the resolver and the turn for
/// lookups ([`LOOKUPS_IN_FLIGHT`] at once).
#[derive(Debug, Clone)]
pub struct Dialer {
    policy: AddressPolicy,
    resolver: Resolver,
    networks: Arc<[IpNet]>,
    lookups: Arc<tokio::sync::Semaphore>,
}

impl Default for Dialer {
    /// The default address policy and the system's resolver; no network
    /// opened.
    fn default() -> Self {
        Self::new(AddressPolicy::default(), Resolver::default())
    }
}

/// Why no connection was made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DialError {
    /// The name has no address, or the lookup failed.
    #[error(transparent)]
    Lookup(#[from] ResolveError),
    /// The lookup answered, with no address.
    #[error("{0}: the name has no address")]
    NoAddress(String),
    /// An address the policy refuses: no connection was attempted, to it or
    /// to the name's other addresses.
    #[error("{address} is {}", .forbidden.describe())]
    Forbidden {
        /// The address refused.
        address: SocketAddr,
        /// Why.
        forbidden: Forbidden,
    },
    /// Looking up and connecting took longer than the connect timeout.
    #[error("no connection within {0:?}")]
    ConnectTimedOut(Duration),
    /// Every address refused the connection or failed; the last one's error.
    #[error("connecting to {address}: {source}")]
    Connect {
        /// The last address tried.
        address: SocketAddr,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The host is not a name a certificate can be checked against.
    #[error("{0:?} is not a name a certificate can be checked against")]
    ServerName(String),
    /// The TLS handshake did not end by the deadline.
    #[error("the TLS handshake with {0} did not end in time")]
    TlsTimedOut(SocketAddr),
    /// The TLS handshake failed (an untrusted certificate, no common
    /// protocol).
    #[error("the TLS handshake with {address} failed: {source}")]
    Tls {
        /// The address connected to.
        address: SocketAddr,
        /// What rustls said (it may name the certificate's names).
        #[source]
        source: std::io::Error,
    },
}

impl Dialer {
    /// Connections checked by `policy`, names looked up with `resolver`.
    #[must_use]
    pub fn new(policy: AddressPolicy, resolver: Resolver) -> Self {
        Self {
            policy,
            resolver,
            networks: Arc::from([]),
            lookups: Arc::new(tokio::sync::Semaphore::new(LOOKUPS_IN_FLIGHT)),
        }
    }

    /// Opens `networks` (loopback, link-local and private CIDRs) to its
    /// connections; never metadata services, the API server or the host.
    #[must_use]
    pub fn with_networks(mut self, networks: impl IntoIterator<Item = IpNet>) -> Self {
        self.networks = networks.into_iter().collect();
        self
    }

    /// The networks it opens.
    #[must_use]
    pub fn networks(&self) -> &[IpNet] {
        &self.networks
    }

    /// Connects to `target`: its name looked up, every address checked (a
    /// name with one refused address among good ones is refused whole, or
    /// which one a connection gets would be the resolver's choice), the
    /// first checked address that answers connected to, within `connect`;
    /// then for HTTPS the TLS handshake, by `deadline`.
    ///
    /// # Errors
    ///
    /// [`DialError`]; [`DialError::Forbidden`] before any connection.
    pub async fn dial(
        &self,
        target: &Target,
        connect: Duration,
        deadline: tokio::time::Instant,
    ) -> Result<Connection, DialError> {
        let (stream, peer) = tokio::time::timeout(connect, self.connect(target))
            .await
            .map_err(|_| DialError::ConnectTimedOut(connect))??;
        let io: Box<dyn Io> = match target.scheme {
            Scheme::Http => Box::new(stream),
            Scheme::Https => {
                let name = server_name(&target.host)?;
                let tls = tokio::time::timeout_at(deadline, tls_connector().connect(name, stream))
                    .await
                    .map_err(|_| DialError::TlsTimedOut(peer))?
                    .map_err(|source| DialError::Tls { address: peer, source })?;
                Box::new(tls)
            }
        };
        Ok(Connection { io, peer })
    }

    async fn connect(&self, target: &Target) -> Result<(TcpStream, SocketAddr), DialError> {
        let addresses: Vec<SocketAddr> = match &target.host {
            Host::Ip(ip) => vec![SocketAddr::new(*ip, target.port)],
            Host::Name(name) => {
                // The semaphore is never closed: a turn is always given.
                let _turn = self.lookups.acquire().await.ok();
                let ips = self.resolver.lookup(name).await?;
                if ips.is_empty() {
                    return Err(DialError::NoAddress(name.clone()));
                }
                ips.into_iter().map(|ip| SocketAddr::new(ip, target.port)).collect()
            }
        };
        for address in &addresses {
            if let Err(forbidden) = self.policy.check(*address, &self.networks) {
                return Err(DialError::Forbidden {
                    address: *address,
                    forbidden,
                });
            }
        }
        let mut last = None;
        for address in addresses {
            match TcpStream::connect(address).await {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    return Ok((stream, address));
                }
                Err(source) => last = Some(DialError::Connect { address, source }),
            }
        }
        Err(last.unwrap_or_else(|| DialError::NoAddress(target.host.to_string())))
    }
}

/// A connection a [`Dialer`] opened: TCP, or TLS over it.
pub struct Connection {
    io: Box<dyn Io>,
    peer: SocketAddr,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// The address connected to: one the policy allowed.
    #[must_use]
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// HTTP/1.1 over this connection: the request sender, and the
    /// connection's own future, which the caller runs (spawned) for as long
    /// as the exchange may last and drops to close the socket.
    ///
    /// # Errors
    ///
    /// When the handshake fails.
    pub async fn handshake<B>(
        self,
    ) -> hyper::Result<(
        hyper::client::conn::http1::SendRequest<B>,
        impl Future<Output = hyper::Result<()>> + Send + 'static,
    )>
    where
        B: http_body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(self))
            .await
    }
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

impl AsyncRead for Connection {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

fn server_name(host: &Host) -> Result<rustls::pki_types::ServerName<'static>, DialError> {
    match host {
        Host::Ip(ip) => Ok(rustls::pki_types::ServerName::from(*ip)),
        Host::Name(name) => {
            rustls::pki_types::ServerName::try_from(name.clone()).map_err(|_| DialError::ServerName(name.clone()))
        }
    }
}

/// One TLS configuration for every connection: the system's trust store, so
/// an operator's own CA (in the host's image) is trusted as any other
/// program there trusts it.
fn tls_connector() -> tokio_rustls::TlsConnector {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        for error in &found.errors {
            tracing::warn!("reading the system's trusted certificates: {error}");
        }
        let (added, ignored) = roots.add_parsable_certificates(found.certs);
        tracing::debug!(added, ignored, "trusted certificates for outbound HTTPS");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|builder| builder.with_root_certificates(roots).with_no_client_auth());
        Arc::new(config.unwrap_or_else(|error| {
            tracing::error!("outbound TLS cannot be configured: {error}");
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        }))
    });
    tokio_rustls::TlsConnector::from(Arc::clone(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Target {
        Target::parse(&url.parse().unwrap()).unwrap()
    }

    fn refused(dialed: Result<Connection, DialError>) -> Option<Forbidden> {
        match dialed {
            Err(DialError::Forbidden { forbidden, .. }) => Some(forbidden),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_refused_address_is_never_connected_to_and_an_opened_network_is() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/");
        let connect = Duration::from_secs(5);
        let deadline = tokio::time::Instant::now() + connect;
        let closed = Dialer::default();
        let dialed = closed.dial(&target(&url), connect, deadline).await;
        assert_eq!(refused(dialed), Some(Forbidden::Loopback));
        let opened = closed.with_networks(["127.0.0.1/32".parse().unwrap()]);
        let connection = opened.dial(&target(&url), connect, deadline).await.unwrap();
        assert_eq!(connection.peer().port(), port);
        let everything = opened.with_networks(["0.0.0.0/0".parse().unwrap()]);
        let dialed = everything
            .dial(&target("http://169.254.169.254/"), connect, deadline)
            .await;
        assert_eq!(refused(dialed), Some(Forbidden::Metadata));
    }

    #[tokio::test]
    async fn every_address_of_a_name_is_checked_before_any_connection() {
        let resolver = Resolver::default().with_override(
            "mixed.example",
            ["93.184.216.34".parse().unwrap(), "10.0.0.5".parse().unwrap()],
        );
        let dialer = Dialer::new(AddressPolicy::default(), resolver);
        let connect = Duration::from_secs(5);
        let deadline = tokio::time::Instant::now() + connect;
        let dialed = dialer.dial(&target("https://mixed.example/"), connect, deadline).await;
        assert_eq!(refused(dialed), Some(Forbidden::Private));
    }
}
