//! Outbound HTTP for guests (`wasi:http/outgoing-handler`): denied unless
//! the operator allowed the destination with `--allow-outbound`, in Spin's
//! `allowed_outbound_hosts` syntax. A denied request fails in the guest with
//! `HTTP-request-denied` and is logged once per destination.
//!
//! Patterns: `SCHEME://HOST[:PORT]`, where SCHEME is `http`, `https` or `*`,
//! HOST is a name, `*.domain` (any name under it) or `*`, and PORT is a
//! number or `*` (omitted: the scheme's default).
//!
//! The decision is made on the addresses the host resolves to, not on how
//! it is written: `127.1`, `2130706433`, `0x7f000001`, `[::ffff:127.0.0.1]`
//! and a name that `/etc/hosts` or DNS points at 127.0.0.1 are all
//! loopback. Loopback, link-local (the instance metadata service at
//! 169.254.169.254, ECS's at 169.254.170.2), unspecified and the metadata
//! service's IPv6 address are never reached through a wildcard or a
//! `*.domain` entry: only an entry naming that address (or that name) allows
//! them. A plain-HTTP request connects to the very address checked (so a
//! second DNS answer cannot differ); an HTTPS request connects by name,
//! and TLS refuses any server that cannot prove that name.

use std::collections::HashSet;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// Longest a guest's request may take to connect, to its first response
/// byte, and between two response frames, unless it asks for less.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// One `--allow-outbound` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Allowed {
    /// `None` for `*`.
    scheme: Option<String>,
    host: HostPattern,
    port: PortPattern,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PortPattern {
    Is(u16),
    /// Omitted: the request's scheme's default.
    Default,
    Any,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    Exact(String),
    /// `*.domain`: names under `domain`.
    Under(String),
    Any,
}

/// The destinations guests may call; empty (the default) denies all.
#[derive(Clone, Debug, Default)]
pub struct OutboundPolicy {
    allowed: Vec<Allowed>,
    /// Destinations already logged as denied.
    logged: Arc<Mutex<HashSet<String>>>,
}

impl OutboundPolicy {
    /// Parses `--allow-outbound` entries; the error names the bad one and the syntax.
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let allowed = entries.into_iter().map(parse_entry).collect::<Result<_, _>>()?;
        Ok(Self { allowed, logged: Arc::default() })
    }

    /// Whether a request to `scheme://host:port` may go out, once `host`
    /// resolved to `addresses` (every address it resolved to: one that may
    /// not be reached denies the request).
    pub fn allows(&self, scheme: &str, host: &str, port: u16, addresses: &[IpAddr]) -> Verdict {
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let special = addresses.iter().copied().find(|ip| is_special(*ip));
        let mut verdict = Verdict::Denied;
        for allowed in &self.allowed {
            let port_matches = match allowed.port {
                PortPattern::Is(p) => p == port,
                PortPattern::Default => default_port(scheme) == port,
                PortPattern::Any => true,
            };
            if !port_matches || allowed.scheme.as_deref().is_some_and(|s| s != scheme) {
                continue;
            }
            // Whether the entry names the destination (`Some(true)`) or
            // covers it by a wildcard (`Some(false)`).
            let named = match &allowed.host {
                // An address names the address, however the request spells it.
                HostPattern::Exact(name) => match name.parse::<IpAddr>() {
                    Ok(ip) => (!addresses.is_empty() && addresses.iter().all(|a| canonical(*a) == canonical(ip))).then_some(true),
                    Err(_) => (*name == host).then_some(true),
                },
                HostPattern::Under(domain) => host.ends_with(&format!(".{domain}")).then_some(false),
                HostPattern::Any => Some(false),
            };
            let Some(named) = named else { continue };
            match (named, special) {
                (true, _) | (false, None) => return Verdict::Allowed,
                (false, Some(ip)) => verdict = Verdict::Special(ip),
            }
        }
        verdict
    }

    /// Says once per destination that a request to it was denied.
    fn log_denied(&self, destination: &str, verdict: &Verdict) {
        if !self.logged.lock().expect("not poisoned").insert(destination.to_owned()) {
            return;
        }
        match verdict {
            Verdict::Special(ip) => tracing::warn!(
                "a processor's HTTP request to {destination} was denied (it sees destination-IP-prohibited): \
                 it resolves to {ip}, a loopback, link-local or metadata address that a wildcard never allows; \
                 an --allow-outbound entry must name that address"
            ),
            _ => tracing::warn!(
                "a processor's HTTP request to {destination} was denied (it sees HTTP-request-denied): \
                 allow it with --allow-outbound {destination}"
            ),
        }
    }
}

/// What [`OutboundPolicy::allows`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// No entry allows the destination.
    Denied,
    /// Only a wildcard allows it, and it resolves to this address, which a
    /// wildcard never reaches.
    Special(IpAddr),
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "http" { 80 } else { 443 }
}

/// An IPv6 address that carries an IPv4 one (mapped `::ffff:a.b.c.d`,
/// compatible `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`) as that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    let s = v6.segments();
    let embedded = || IpAddr::V4(Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8));
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => embedded(),
        // `::` and `::1` are IPv6's own.
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => embedded(),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => embedded(),
        _ => ip,
    }
}

/// Loopback, link-local, unspecified ("this host", 0.0.0.0/8) and the
/// metadata service's IPv6 address (`fd00:ec2::254`), however written.
fn is_special(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(ip) => ip.is_loopback() || ip.is_link_local() || ip.octets()[0] == 0,
        IpAddr::V6(ip) => {
            ip.is_loopback() || ip.is_unspecified() || (ip.segments()[0] & 0xffc0) == 0xfe80 || ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
        }
    }
}

fn parse_entry(entry: &str) -> Result<Allowed, String> {
    let bad = |why: &str| {
        format!(
            "--allow-outbound `{entry}`: {why}; write SCHEME://HOST[:PORT], e.g. `https://api.example.com`, \
             `https://*.example.com:8443`, `http://127.0.0.1:8080`"
        )
    };
    let (scheme, rest) = entry.split_once("://").ok_or_else(|| bad("no scheme"))?;
    let scheme = match scheme {
        "http" | "https" => Some(scheme.to_owned()),
        "*" => None,
        _ => return Err(bad("the scheme must be http, https or *")),
    };
    let rest = rest.trim_end_matches('/');
    if rest.contains('/') {
        return Err(bad("a destination has no path"));
    }
    let (host, port) = match rest.rsplit_once(':').filter(|(host, _)| !host.ends_with(':') && (!host.starts_with('[') || host.ends_with(']'))) {
        Some((host, "*")) => (host, PortPattern::Any),
        Some((host, port)) => (host, PortPattern::Is(port.parse::<u16>().map_err(|_| bad("the port must be a number or *"))?)),
        None => (rest, PortPattern::Default),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    let host = match host.as_str() {
        "" => return Err(bad("no host")),
        "*" => HostPattern::Any,
        _ => match host.strip_prefix("*.") {
            Some(domain) if !domain.is_empty() && !domain.contains('*') => HostPattern::Under(domain.to_owned()),
            _ if host.contains('*') => return Err(bad("a wildcard is `*` or `*.domain`")),
            _ => HostPattern::Exact(host),
        },
    };
    Ok(Allowed { scheme, host, port })
}

/// The `wasi:http` hooks of one instance: the policy, applied to each request.
pub(crate) struct OutboundHooks {
    pub(crate) policy: OutboundPolicy,
}

impl WasiHttpHooks for OutboundHooks {
    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = Result<(http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>), HttpError>> + Send> {
        drop(fut);
        let policy = self.policy.clone();
        let options = capped(options.unwrap_or_default());
        Box::new(async move {
            let uri = request.uri();
            let scheme = uri.scheme_str().unwrap_or("https").to_owned();
            let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
            let port = uri.port_u16().unwrap_or_else(|| default_port(&scheme));
            let destination = format!("{scheme}://{host}:{port}");
            // Nothing allowed on any address: no lookup either.
            if policy.allowed.is_empty() {
                policy.log_denied(&destination, &Verdict::Denied);
                return Err(HttpError::HttpRequestDenied);
            }
            let addresses = resolve(&host, port, options.connect_timeout.unwrap_or(CONNECT_TIMEOUT)).await?;
            match policy.allows(&scheme, &host, port, &addresses) {
                Verdict::Allowed => {}
                Verdict::Denied => {
                    policy.log_denied(&destination, &Verdict::Denied);
                    return Err(HttpError::HttpRequestDenied);
                }
                special @ Verdict::Special(_) => {
                    policy.log_denied(&destination, &special);
                    return Err(HttpError::DestinationIpProhibited);
                }
            }
            if scheme == "http" {
                // Connect to the address checked: the Host header keeps the name.
                pin_address(&mut request, addresses[0], port)?;
            }
            let (response, io) = wasmtime_wasi_http::default_send_request(request, Some(options)).await?;
            Ok((response.map(BodyExt::boxed_unsync), Box::new(io) as Box<dyn Future<Output = _> + Send>))
        })
    }
}

/// Every address `host` resolves to (an address in any spelling resolves
/// to itself).
async fn resolve(host: &str, port: u16, timeout: Duration) -> Result<Vec<IpAddr>, HttpError> {
    let lookup = tokio::time::timeout(timeout, tokio::net::lookup_host((host, port))).await.map_err(|_| HttpError::DnsTimeout)?;
    let addresses: Vec<IpAddr> = lookup.map_err(|_| HttpError::DestinationNotFound)?.map(|a| a.ip()).collect();
    if addresses.is_empty() {
        return Err(HttpError::DestinationNotFound);
    }
    Ok(addresses)
}

/// Points `request` at `ip` itself, keeping its scheme, path and query.
fn pin_address(request: &mut http::Request<WasiBody>, ip: IpAddr, port: u16) -> Result<(), HttpError> {
    let authority = match ip {
        IpAddr::V4(ip) => format!("{ip}:{port}"),
        IpAddr::V6(ip) => format!("[{ip}]:{port}"),
    };
    let uri = request.uri();
    let pinned = http::Uri::builder()
        .scheme(uri.scheme_str().unwrap_or("http"))
        .authority(authority)
        .path_and_query(uri.path_and_query().map_or("/", |p| p.as_str()))
        .build()
        .map_err(|_| HttpError::HttpRequestUriInvalid)?;
    *request.uri_mut() = pinned;
    Ok(())
}

/// The guest's timeouts, none longer than ours.
fn capped(asked: RequestOptions) -> RequestOptions {
    let cap = |asked: Option<Duration>, most: Duration| Some(asked.map_or(most, |a| a.min(most)));
    RequestOptions {
        connect_timeout: cap(asked.connect_timeout, CONNECT_TIMEOUT),
        first_byte_timeout: cap(asked.first_byte_timeout, RESPONSE_TIMEOUT),
        between_bytes_timeout: cap(asked.between_bytes_timeout, RESPONSE_TIMEOUT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[&str]) -> OutboundPolicy {
        OutboundPolicy::parse(entries.iter().copied()).unwrap()
    }

    const PUBLIC: [IpAddr; 1] = [IpAddr::V4(Ipv4Addr::new(93, 184, 215, 14))];

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        assert_eq!(OutboundPolicy::default().allows("https", "api.example.com", 443, &PUBLIC), Verdict::Denied);
    }

    #[test]
    fn entries_match_scheme_host_and_port_as_spin_writes_them() {
        let p = policy(&["https://api.example.com", "https://*.example.org:8443", "*://data.example.net:*"]);
        let allows = |scheme, host, port| p.allows(scheme, host, port, &PUBLIC) == Verdict::Allowed;
        assert!(allows("https", "api.example.com", 443));
        assert!(!allows("http", "api.example.com", 80), "another scheme");
        assert!(!allows("https", "api.example.com", 8443), "another port");
        assert!(allows("https", "a.b.example.org", 8443));
        assert!(!allows("https", "example.org", 8443), "*.domain is names under it");
        assert!(allows("http", "data.example.net", 9000));
        assert!(!allows("https", "evil.com", 443));
    }

    #[test]
    fn a_wildcard_never_reaches_loopback_link_local_or_metadata_addresses_however_spelled() {
        let any = policy(&["*://*:*", "http://*.example.com"]);
        assert_eq!(any.allows("https", "example.com", 443, &PUBLIC), Verdict::Allowed);
        // What each spelling resolves to; a name resolving to any of them is denied alike.
        for address in ["127.0.0.1", "127.0.0.2", "169.254.169.254", "169.254.170.2", "0.0.0.0", "::1", "::", "fe80::1", "::ffff:127.0.0.1", "::ffff:a9fe:a9fe", "::127.0.0.1", "64:ff9b::a9fe:a9fe", "fd00:ec2::254"] {
            let verdict = any.allows("http", "rebound.example.com", 80, &[ip(address)]);
            assert_eq!(verdict, Verdict::Special(ip(address)), "{address}");
        }
        // One bad address among good ones denies the request.
        assert!(matches!(any.allows("http", "x.example.com", 80, &[PUBLIC[0], ip("127.0.0.1")]), Verdict::Special(_)));
    }

    #[test]
    fn an_entry_naming_an_address_allows_it_in_any_spelling_and_a_named_host_is_allowed() {
        let named = policy(&["http://127.0.0.1:8080", "http://169.254.169.254", "http://localhost:9000"]);
        assert_eq!(named.allows("http", "127.0.0.1", 8080, &[ip("127.0.0.1")]), Verdict::Allowed);
        assert_eq!(named.allows("http", "127.1", 8080, &[ip("127.0.0.1")]), Verdict::Allowed);
        assert_eq!(named.allows("http", "::ffff:127.0.0.1", 8080, &[ip("::ffff:127.0.0.1")]), Verdict::Allowed);
        assert_eq!(named.allows("http", "169.254.169.254", 80, &[ip("169.254.169.254")]), Verdict::Allowed);
        assert_eq!(named.allows("http", "localhost", 9000, &[ip("127.0.0.1"), ip("::1")]), Verdict::Allowed);
        assert_eq!(named.allows("http", "127.0.0.1", 9000, &[ip("127.0.0.1")]), Verdict::Denied, "another port");
    }

    #[test]
    fn a_bad_entry_says_which_and_how_to_write_one() {
        for (entry, why) in [("api.example.com", "no scheme"), ("ftp://x", "scheme"), ("https://x:http", "port"), ("https://a*b.com", "wildcard"), ("https://x/path", "path")] {
            let error = OutboundPolicy::parse([entry]).unwrap_err();
            assert!(error.contains(entry) && error.contains(why) && error.contains("SCHEME://HOST[:PORT]"), "{error}");
        }
    }
}
