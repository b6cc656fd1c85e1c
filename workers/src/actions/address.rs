//! Which destinations `http.request` may reach: a plan (possibly written by a model) chooses the URL, and must
//! not be able to read a cloud instance's credentials or, unless the worker's operator allows it, reach services
//! on the worker's own host or private network.
//!
//! | range | examples | refused |
//! |---|---|---|
//! | link-local, cloud metadata | `169.254.0.0/16`, `fe80::/10`, `fd00:ec2::254`, `100.100.100.200`, `metadata.google.internal` | always; no setting allows them |
//! | loopback | `127.0.0.0/8`, `0.0.0.0/8`, `::1`, `::` | unless `allow_loopback` or the host is listed in `allow_hosts` |
//! | private | `10/8`, `172.16/12`, `192.168/16`, `100.64/10` (CGNAT), `fc00::/7`, `fec0::/10` | unless `allow_private` or the host is listed in `allow_hosts` |
//! | anything else | | never |
//!
//! An IPv6 address that carries an IPv4 address is judged by the IPv4 address it carries: IPv4-mapped
//! (`::ffff:a.b.c.d`), IPv4-translated (`::ffff:0:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), NAT64
//! (`64:ff9b::/96`), 6to4 (`2002:AABB:CCDD::/48`) and Teredo (`2001:0::/32`, server and client). The local-use
//! NAT64 prefix `64:ff9b:1::/48` is a translator inside the operator's network, so it is at least private, and
//! link-local wherever RFC 6052 could have placed a link-local IPv4 address in it. Decimal, octal and hex IPv4
//! forms (`http://2852039166/`, `http://0xA9FEA9FE/`, `http://0251.0376.0251.0376/`) need nothing here: the
//! URL parser normalises them to `169.254.169.254` before any check.
//!
//! The check runs wherever an address becomes known, so neither a host name nor a redirect can route around it:
//! on the URL before sending ([`AddressPolicy::check_url`]), on every redirect target (the redirect policy of
//! `transport::builder`), and on every address a host name resolves to ([`GuardedResolver`]), which also
//! defeats DNS names pointing at `169.254.169.254` or `127.0.0.1`.
//!
//! An `allow_hosts` entry with a port allows the host on that port only. A resolver is told the name but not the
//! port, so the port of the destination being connected travels to it in a task-local set by [`guarded`] and by
//! the redirect policy ([`note_destination`]); both run inside the request's own future, where the resolver is
//! called. A resolution outside that scope sees no port, so only port-less entries apply to it: a change in how
//! reqwest polls its connector could make the guard refuse more, never less.

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde::{Deserialize, Serialize};

/// Host names of metadata services, refused whatever they resolve to.
const METADATA_HOSTS: [&str; 4] =
    ["metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"];

/// AWS' IPv6 instance metadata endpoint (outside `fe80::/10`, so listed explicitly).
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// Alibaba Cloud's metadata endpoint (inside CGNAT `100.64/10`, so listed explicitly: never merely private).
const ALIBABA_METADATA_V4: Ipv4Addr = Ipv4Addr::new(100, 100, 100, 200);

/// What an address is, as far as the guard is concerned. Ordered from least to most restricted, so the
/// stricter of two readings is their `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Range {
    /// A public address: always allowed.
    Public,
    /// A private network's address (RFC 1918, CGNAT, unique local IPv6).
    Private,
    /// The worker's own host.
    Loopback,
    /// Link-local or a cloud metadata service: never allowed.
    LinkLocal,
}

impl Range {
    /// The name used in failure details (`details.refused`).
    pub fn name(self) -> &'static str {
        match self {
            Range::Public => "public",
            Range::Private => "private",
            Range::Loopback => "loopback",
            Range::LinkLocal => "link_local_or_metadata",
        }
    }
}

/// The range of `ip`, looking through every IPv4 embedding listed in the module docs.
pub fn range_of(ip: IpAddr) -> Range {
    match ip {
        IpAddr::V4(v4) => range_of_v4(v4),
        IpAddr::V6(v6) => range_of_v6(v6),
    }
}

fn range_of_v4(ip: Ipv4Addr) -> Range {
    let [a, b, ..] = ip.octets();
    if ip.is_link_local() || ip == ALIBABA_METADATA_V4 {
        Range::LinkLocal
    } else if ip.is_loopback() || a == 0 {
        // `0.0.0.0/8` is "this host": on Linux a connection to 0.0.0.0 reaches the local host.
        Range::Loopback
    } else if ip.is_private() || (a == 100 && (b & 0xc0) == 64) {
        Range::Private
    } else {
        Range::Public
    }
}

fn v4(high: u16, low: u16) -> Ipv4Addr {
    Ipv4Addr::from((u32::from(high) << 16) | u32::from(low))
}

fn range_of_v6(ip: Ipv6Addr) -> Range {
    let s = ip.segments();
    if ip.is_unspecified() || ip.is_loopback() {
        return Range::Loopback;
    }
    if (s[0] & 0xffc0) == 0xfe80 || ip == AWS_METADATA_V6 {
        return Range::LinkLocal;
    }
    let zero = |range: std::ops::Range<usize>| s[range].iter().all(|&x| x == 0);
    // IPv4-mapped, IPv4-translated (SIIT) and IPv4-compatible.
    if (zero(0..5) && s[5] == 0xffff) || (zero(0..4) && s[4] == 0xffff && s[5] == 0) || zero(0..6) {
        return range_of_v4(v4(s[6], s[7]));
    }
    // NAT64, well-known prefix (RFC 6052: only the /96 form).
    if s[0] == 0x64 && s[1] == 0xff9b && zero(2..6) {
        return range_of_v4(v4(s[6], s[7]));
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        return local_nat64(ip);
    }
    // 6to4: the IPv4 address is bits 16–47.
    if s[0] == 0x2002 {
        return range_of_v4(v4(s[1], s[2]));
    }
    // Teredo: the server's IPv4 address in bits 32–63, the client's inverted in bits 96–127.
    if s[0] == 0x2001 && s[1] == 0 {
        return range_of_v4(v4(s[2], s[3])).max(range_of_v4(v4(!s[6], !s[7])));
    }
    if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfec0 {
        return Range::Private;
    }
    Range::Public
}

/// `64:ff9b:1::/48` (RFC 8215): the operator's own translator, so at least private; link-local when any prefix
/// length RFC 6052 allows under a /48 (48, 56, 64, 96) places a link-local address in it.
fn local_nat64(ip: Ipv6Addr) -> Range {
    let o = ip.octets();
    let placements = [[o[6], o[7], o[9], o[10]], [o[7], o[9], o[10], o[11]], [o[9], o[10], o[11], o[12]]];
    if placements.iter().any(|p| range_of_v4(Ipv4Addr::from(*p)) == Range::LinkLocal) {
        return Range::LinkLocal;
    }
    range_of_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15])).max(Range::Private)
}

/// Whether `host` (a name, without port) is a metadata service name. Case-insensitive; a trailing dot is
/// ignored.
pub fn is_metadata_host(host: &str) -> bool {
    METADATA_HOSTS.contains(&normalize(host).as_str())
}

/// A host name as compared here: lower case, without a trailing dot.
fn normalize(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// A URL's host as an address when it is an IP literal (`host_str` writes IPv6 literals in brackets).
fn literal(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// The host of an `allow_hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowedName {
    /// A host name, normalised (lower case, no trailing dot).
    Name(String),
    /// An address: matches an IP literal in a URL and any name resolving to it.
    Ip(IpAddr),
}

/// One `allow_hosts` entry: `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address. Hosts are read as
/// URLs read them, so `LOCALHOST.` is `localhost` and `2130706433` is `127.0.0.1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AllowedHost {
    host: AllowedName,
    port: Option<u16>,
}

impl AllowedHost {
    fn matches(&self, name: Option<&str>, ip: IpAddr, port: Option<u16>) -> bool {
        let host = match &self.host {
            AllowedName::Name(allowed) => name.is_some_and(|name| normalize(name) == *allowed),
            AllowedName::Ip(allowed) => *allowed == ip,
        };
        host && self.port.is_none_or(|allowed| port == Some(allowed))
    }
}

impl FromStr for AllowedHost {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let invalid = || format!("`{text}` is not `host[:port]` (IPv6 with a port as `[::1]:8080`)");
        if text.is_empty() || text.contains(['/', '@', '?', '#', ' ']) {
            return Err(invalid());
        }
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or_else(invalid)?;
            let port = if after.is_empty() { None } else { Some(after.strip_prefix(':').ok_or_else(invalid)?) };
            (format!("[{inside}]"), port)
        } else if text.matches(':').count() > 1 {
            (format!("[{text}]"), None)
        } else {
            match text.split_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port)),
                None => (text.to_owned(), None),
            }
        };
        let port = port.map(|p| p.parse::<u16>().map_err(|_| invalid())).transpose()?;
        let url = Url::parse(&format!("http://{host}/")).map_err(|_| invalid())?;
        let host = url.host_str().ok_or_else(invalid)?;
        let host = match literal(host) {
            Some(ip) => AllowedName::Ip(ip),
            None => AllowedName::Name(normalize(host)),
        };
        Ok(AllowedHost { host, port })
    }
}

impl TryFrom<String> for AllowedHost {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.host, self.port) {
            (AllowedName::Name(name), None) => write!(f, "{name}"),
            (AllowedName::Name(name), Some(port)) => write!(f, "{name}:{port}"),
            (AllowedName::Ip(ip), port) => write!(f, "{}", destination(&ip.to_string(), port)),
        }
    }
}

impl From<AllowedHost> for String {
    fn from(host: AllowedHost) -> String {
        host.to_string()
    }
}

/// `host:port` as written in a URL (IPv6 in brackets), or the host alone when the port is unknown.
fn destination(host: &str, port: Option<u16>) -> String {
    let bracketed = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_owned() };
    match port {
        Some(port) => format!("{bracketed}:{port}"),
        None => bracketed,
    }
}

/// Which loopback and private destinations `http.request` may reach (link-local and metadata never).
/// `Default` refuses both, as `cairn worker` does unless told otherwise; [`AddressPolicy::local`] allows both,
/// as `cairn dev` does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct AddressPolicy {
    /// Allow the worker's own host (`127.0.0.0/8`, `::1`, and their embedded forms).
    pub allow_loopback: bool,
    /// Allow private networks (`10/8`, `172.16/12`, `192.168/16`, `100.64/10`, `fc00::/7`, …).
    pub allow_private: bool,
    /// Hosts allowed even when loopback or private (never when link-local or metadata).
    pub allow_hosts: Vec<AllowedHost>,
}

impl AddressPolicy {
    /// Loopback and private destinations allowed: a developer's machine.
    pub fn local() -> Self {
        Self { allow_loopback: true, allow_private: true, allow_hosts: Vec::new() }
    }

    /// Checks a URL's host: an IP literal by its range, a name against the metadata names (the addresses a name
    /// resolves to are checked by [`GuardedResolver`]).
    ///
    /// # Errors
    /// [`Refused`] naming the destination and why.
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        let Some(host) = url.host_str() else {
            return Ok(());
        };
        let port = url.port_or_known_default();
        match literal(host) {
            Some(ip) => self.check_address(None, ip, port).map_err(|range| Refused::new(host, port, None, range)),
            None if is_metadata_host(host) => Err(Refused::new(host, port, None, Range::LinkLocal)),
            None => Ok(()),
        }
    }

    /// Whether `ip`, reached under the host name `name` (if any) on `port` (if known), is allowed.
    fn check_address(&self, name: Option<&str>, ip: IpAddr, port: Option<u16>) -> Result<(), Range> {
        let range = range_of(ip);
        let allowed = match range {
            Range::Public => true,
            Range::LinkLocal => false,
            Range::Loopback => self.allow_loopback || self.lists(name, ip, port),
            Range::Private => self.allow_private || self.lists(name, ip, port),
        };
        if allowed { Ok(()) } else { Err(range) }
    }

    fn lists(&self, name: Option<&str>, ip: IpAddr, port: Option<u16>) -> bool {
        self.allow_hosts.iter().any(|entry| entry.matches(name, ip, port))
    }
}

/// A destination the guard refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Refused {
    /// `host:port` as in the URL, and the address it resolved to for a name: `localhost:8080 (127.0.0.1)`.
    pub destination: String,
    /// Why it is refused.
    pub range: Range,
}

impl Refused {
    fn new(host: &str, port: Option<u16>, resolved: Option<IpAddr>, range: Range) -> Self {
        let mut destination = destination(host, port);
        if let Some(ip) = resolved {
            destination.push_str(&format!(" ({ip})"));
        }
        Self { destination, range }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let destination = &self.destination;
        let allow = |setting: &str, env: &str| {
            format!(
                "refused (allow it on the worker with `{setting} = true` in cairn.toml or {env}=true, or list the \
                 host in `http_allow_hosts` / CAIRN_HTTP_ALLOW_HOSTS)"
            )
        };
        match self.range {
            Range::LinkLocal => write!(
                f,
                "destination `{destination}` is a link-local or cloud metadata address; refused, and no setting \
                 allows it"
            ),
            Range::Loopback => write!(
                f,
                "destination `{destination}` is a loopback address; {}",
                allow("http_allow_loopback", "CAIRN_HTTP_ALLOW_LOOPBACK")
            ),
            // `Public` is never refused; it shares the private arm only to keep the match total.
            Range::Private | Range::Public => write!(
                f,
                "destination `{destination}` is a private-network address; {}",
                allow("http_allow_private", "CAIRN_HTTP_ALLOW_PRIVATE")
            ),
        }
    }
}

tokio::task_local! {
    /// The host name and port of the destination whose connection the current request is making, for
    /// [`GuardedResolver`] (see the module docs).
    static DESTINATION: RefCell<Option<(String, u16)>>;
}

/// The name and port of `url`'s destination, when its host is a name.
fn named_destination(url: &Url) -> Option<(String, u16)> {
    let host = url.host_str()?;
    if literal(host).is_some() {
        return None;
    }
    Some((normalize(host), url.port_or_known_default()?))
}

/// Runs `call`, a request to `url` on a guarded client, with `url`'s port known to the resolver.
pub(crate) async fn guarded<F: Future>(url: &Url, call: F) -> F::Output {
    DESTINATION.scope(RefCell::new(named_destination(url)), call).await
}

/// Records that the current request goes on to `url` (a redirect about to be followed).
pub(crate) fn note_destination(url: &Url) {
    let _ = DESTINATION.try_with(|current| *current.borrow_mut() = named_destination(url));
}

/// The port the current request connects to `host` on, when known.
fn destination_port(host: &str) -> Option<u16> {
    let host = normalize(host);
    DESTINATION
        .try_with(|current| current.borrow().as_ref().filter(|(name, _)| *name == host).map(|(_, port)| *port))
        .ok()
        .flatten()
}

/// A DNS resolver that drops the addresses its policy refuses from every answer, and fails with [`Refused`]
/// when none remain.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<AddressPolicy>,
}

impl GuardedResolver {
    /// A resolver applying `policy`.
    pub fn new(policy: Arc<AddressPolicy>) -> Self {
        Self { policy }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        // Read now: this call runs inside the request's future (see the module docs); the future may not.
        let port = destination_port(&host);
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            if is_metadata_host(&host) {
                return Err(Refused::new(&host, port, None, Range::LinkLocal).into());
            }
            // Port 0: reqwest replaces it with the URL's port.
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match policy.check_address(Some(&host), a.ip(), port) {
                    Ok(()) => true,
                    Err(range) => {
                        refused.get_or_insert(Refused::new(&host, port, Some(a.ip()), range));
                        false
                    }
                })
                .collect();
            if let (true, Some(refused)) = (allowed.is_empty(), refused) {
                return Err(refused.into());
            }
            let addrs: Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

/// Whether `error` (or any of its sources) is a [`Refused`].
pub fn find_refused<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refused> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<Refused>() {
            return Some(refused);
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests;
