//! Which destinations `http.request` refuses: link-local addresses and cloud metadata services, which a plan
//! (possibly written by a model) must not be able to reach from inside the worker's network.
//!
//! The check runs at three points so neither a host name nor a redirect can route around it: on the URL before
//! sending ([`check_url`]), on every redirect target (the redirect policy calls [`check_url`]), and on every
//! address a host name resolves to ([`GuardedResolver`]), which also defeats DNS names pointing at
//! `169.254.169.254`. Loopback and private ranges are allowed (tests and local services need them).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Host names of metadata services, refused whatever they resolve to.
const METADATA_HOSTS: [&str; 2] = ["metadata.google.internal", "metadata"];

/// AWS' IPv6 instance metadata endpoint (outside `fe80::/10`, so listed explicitly).
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// A destination the guard refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("destination `{0}` is a link-local or metadata address; refused (set `allow_link_local` to permit it)")]
pub struct Refused(pub String);

/// Whether `ip` is link-local (`169.254.0.0/16`, `fe80::/10`, or IPv4-mapped link-local) or a metadata
/// service address.
pub fn is_refused_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4.is_link_local();
            }
            (v6.segments()[0] & 0xffc0) == 0xfe80 || v6 == AWS_METADATA_V6
        }
    }
}

/// Whether `host` (a name, without port) is a metadata service name. Case-insensitive; a trailing dot is
/// ignored.
pub fn is_refused_host(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    METADATA_HOSTS.contains(&host.as_str())
}

/// Checks a URL's host: an IP literal against [`is_refused_ip`], a name against [`is_refused_host`].
///
/// # Errors
/// [`Refused`] naming the host.
pub fn check_url(url: &Url) -> Result<(), Refused> {
    let Some(host) = url.host_str() else {
        return Ok(());
    };
    // `host_str` writes IPv6 literals in brackets.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let refused = match bare.parse::<IpAddr>() {
        Ok(ip) => is_refused_ip(ip),
        Err(_) => is_refused_host(host),
    };
    if refused { Err(Refused(host.to_owned())) } else { Ok(()) }
}

/// A DNS resolver that drops refused addresses from every answer and fails when none remain.
#[derive(Debug, Clone, Copy, Default)]
pub struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            if is_refused_host(&host) {
                return Err(Refused(host).into());
            }
            // Port 0: reqwest replaces it with the URL's port.
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found.into_iter().filter(|a| !is_refused_ip(a.ip())).collect();
            if allowed.is_empty() {
                return Err(Refused(host).into());
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
mod tests {
    use super::*;

    #[test]
    fn link_local_and_metadata_are_refused_but_loopback_and_private_are_not() {
        for refused in ["169.254.169.254", "169.254.0.1", "fe80::1", "::ffff:169.254.169.254", "fd00:ec2::254"] {
            let ip: IpAddr = refused.parse().expect("an IP");
            assert!(is_refused_ip(ip), "{refused} must be refused");
        }
        for allowed in ["127.0.0.1", "10.0.0.1", "192.168.1.1", "::1", "8.8.8.8"] {
            let ip: IpAddr = allowed.parse().expect("an IP");
            assert!(!is_refused_ip(ip), "{allowed} must be allowed");
        }
        assert!(is_refused_host("Metadata.Google.Internal."));
        assert!(!is_refused_host("example.com"));
    }
}
