//! Outbound HTTP for guests (`wasi:http/outgoing-handler`): denied unless
//! the operator allowed the destination with `--allow-outbound`, in Spin's
//! `allowed_outbound_hosts` syntax. A denied request fails in the guest with
//! `HTTP-request-denied` and is logged once per destination.
//!
//! Patterns: `SCHEME://HOST[:PORT]`, where SCHEME is `http`, `https` or `*`,
//! HOST is a name, `*.domain` (any name under it) or `*`, and PORT is a
//! number or `*` (omitted: the scheme's default). Loopback and link-local
//! addresses (the instance metadata service) are never matched by a
//! wildcard: they need an entry that names them.

use std::collections::HashSet;
use std::future::Future;
use std::net::IpAddr;
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

    /// Whether a request to `scheme://host:port` may go out.
    pub fn allows(&self, scheme: &str, host: &str, port: u16) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let special = is_loopback_or_link_local(&host);
        self.allowed.iter().any(|a| {
            a.scheme.as_deref().is_none_or(|s| s == scheme)
                && match a.port {
                    PortPattern::Is(p) => p == port,
                    PortPattern::Default => default_port(scheme) == port,
                    PortPattern::Any => true,
                }
                && match &a.host {
                    HostPattern::Exact(name) => *name == host,
                    HostPattern::Under(domain) => !special && host.ends_with(&format!(".{domain}")),
                    HostPattern::Any => !special,
                }
        })
    }

    /// Says once per destination that a request to it was denied.
    fn log_denied(&self, destination: &str) {
        if self.logged.lock().expect("not poisoned").insert(destination.to_owned()) {
            tracing::warn!(
                "a processor's HTTP request to {destination} was denied (it sees HTTP-request-denied): \
                 allow it with --allow-outbound {destination}"
            );
        }
    }
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "http" { 80 } else { 443 }
}

fn is_loopback_or_link_local(host: &str) -> bool {
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => ip.is_loopback() || ip.is_link_local() || ip.is_unspecified(),
        Ok(IpAddr::V6(ip)) => ip.is_loopback() || ip.is_unspecified() || (ip.segments()[0] & 0xffc0) == 0xfe80 || ip.segments()[0] == 0xfd00,
        Err(_) => false,
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
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = Result<(http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>), HttpError>> + Send> {
        drop(fut);
        let uri = request.uri();
        let scheme = uri.scheme_str().unwrap_or("https").to_owned();
        let host = uri.host().unwrap_or_default().to_owned();
        let port = uri.port_u16().unwrap_or_else(|| default_port(&scheme));
        if !self.policy.allows(&scheme, &host, port) {
            self.policy.log_denied(&format!("{scheme}://{host}:{port}"));
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        let options = capped(options.unwrap_or_default());
        Box::new(async move {
            let (response, io) = wasmtime_wasi_http::default_send_request(request, Some(options)).await?;
            Ok((response.map(BodyExt::boxed_unsync), Box::new(io) as Box<dyn Future<Output = _> + Send>))
        })
    }
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

    #[test]
    fn nothing_is_allowed_by_default() {
        assert!(!OutboundPolicy::default().allows("https", "api.example.com", 443));
    }

    #[test]
    fn entries_match_scheme_host_and_port_as_spin_writes_them() {
        let p = policy(&["https://api.example.com", "https://*.example.org:8443", "*://data.example.net:*"]);
        assert!(p.allows("https", "api.example.com", 443));
        assert!(!p.allows("http", "api.example.com", 80), "another scheme");
        assert!(!p.allows("https", "api.example.com", 8443), "another port");
        assert!(p.allows("https", "a.b.example.org", 8443));
        assert!(!p.allows("https", "example.org", 8443), "*.domain is names under it");
        assert!(p.allows("http", "data.example.net", 9000));
        assert!(!p.allows("https", "evil.com", 443));
    }

    #[test]
    fn loopback_and_the_metadata_address_need_an_entry_that_names_them() {
        let any = policy(&["*://*:*"]);
        assert!(any.allows("https", "example.com", 443));
        for host in ["127.0.0.1", "localhost", "169.254.169.254", "[::1]"] {
            assert!(!any.allows("http", host, 80), "{host}");
        }
        let named = policy(&["http://127.0.0.1:8080", "http://169.254.169.254"]);
        assert!(named.allows("http", "127.0.0.1", 8080));
        assert!(named.allows("http", "169.254.169.254", 80));
    }

    #[test]
    fn a_bad_entry_says_which_and_how_to_write_one() {
        for (entry, why) in [("api.example.com", "no scheme"), ("ftp://x", "scheme"), ("https://x:http", "port"), ("https://a*b.com", "wildcard"), ("https://x/path", "path")] {
            let error = OutboundPolicy::parse([entry]).unwrap_err();
            assert!(error.contains(entry) && error.contains(why) && error.contains("SCHEME://HOST[:PORT]"), "{error}");
        }
    }
}
