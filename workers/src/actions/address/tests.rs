//! Every encoding of every range, read through the URL parser exactly as `http.request` reads a step's URL.

use super::*;

fn url(text: &str) -> Url {
    Url::parse(text).unwrap_or_else(|e| panic!("{text} parses: {e}"))
}

fn hosts(entries: &[&str]) -> Vec<AllowedHost> {
    entries.iter().map(|e| e.parse().unwrap_or_else(|e| panic!("a valid entry: {e}"))).collect()
}

/// Link-local and metadata destinations, one per encoding.
const NEVER: [&str; 22] = [
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.0.1/",
    "http://2852039166/",
    "http://0xA9FEA9FE/",
    "http://0251.0376.0251.0376/",
    "http://169.254.43518/",
    "http://[fe80::1]/",
    "http://[febf:ffff::1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[::169.254.169.254]/",
    "http://[::ffff:0:169.254.169.254]/",
    "http://[64:ff9b::169.254.169.254]/",
    "http://[64:ff9b:1::a9fe:a9fe]/",
    "http://[64:ff9b:1:a9fe:a9:fe00::]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[2001:0:4136:e378:8000:63bf:5601:5601]/",
    "http://[fd00:ec2::254]/",
    "http://100.100.100.200/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.Google.Internal./",
    "http://instance-data/",
];

/// Loopback destinations, one per encoding.
const LOOPBACK: [&str; 14] = [
    "http://127.0.0.1/",
    "http://127.1.2.3:8080/",
    "http://127.1/",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0177.0.0.1/",
    "http://0.0.0.0/",
    "http://[::1]/",
    "http://[::]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::127.0.0.1]/",
    "http://[64:ff9b::127.0.0.1]/",
    "http://[2002:7f00:1::]/",
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
];

/// Private-network destinations, one per encoding.
const PRIVATE: [&str; 14] = [
    "http://10.0.0.1/",
    "http://167772161/",
    "http://172.16.0.1/",
    "http://172.31.255.255/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",
    "http://100.127.255.254/",
    "http://[fc00::1]/",
    "http://[fd12:3456::1]/",
    "http://[::ffff:10.0.0.1]/",
    "http://[64:ff9b::10.0.0.1]/",
    "http://[2002:c0a8:101::]/",
    "http://[64:ff9b:1::808:808]/",
    "http://[fec0::1]/",
];

/// Public destinations, including near misses of the ranges above.
const PUBLIC: [&str; 11] = [
    "http://8.8.8.8/",
    "http://1.1.1.1/",
    "http://172.32.0.1/",
    "http://100.128.0.1/",
    "http://169.255.0.1/",
    "http://[2001:4860:4860::8888]/",
    "http://[64:ff9b::8.8.8.8]/",
    "http://[2002:808:808::]/",
    "http://[2001:0:4136:e378:8000:63bf:f7f7:f7f7]/",
    "http://example.com/",
    "https://api.open-meteo.com/v1/forecast",
];

#[test]
fn url_parsing_normalises_numeric_ipv4_forms_before_the_check() {
    for text in ["http://2852039166/", "http://0xA9FEA9FE/", "http://0251.0376.0251.0376/", "http://169.254.43518/"] {
        assert_eq!(url(text).host_str(), Some("169.254.169.254"), "{text} is read as 169.254.169.254");
    }
}

#[test]
fn link_local_and_metadata_are_refused_in_every_encoding_whatever_is_allowed() {
    let everything = AddressPolicy {
        allow_loopback: true,
        allow_private: true,
        allow_hosts: hosts(&["169.254.169.254", "[fd00:ec2::254]", "metadata.google.internal", "100.100.100.200"]),
    };
    for text in NEVER {
        for policy in [AddressPolicy::default(), everything.clone()] {
            let refused = policy.check_url(&url(text)).expect_err(text);
            assert_eq!(refused.range, Range::LinkLocal, "{text} is link-local or metadata");
            assert!(refused.to_string().contains("no setting allows it"), "{text}: {refused}");
        }
    }
}

#[test]
fn loopback_is_refused_in_every_encoding_unless_loopback_is_allowed() {
    let loopback = AddressPolicy { allow_loopback: true, ..AddressPolicy::default() };
    let private = AddressPolicy { allow_private: true, ..AddressPolicy::default() };
    for text in LOOPBACK {
        let refused = AddressPolicy::default().check_url(&url(text)).expect_err(text);
        assert_eq!(refused.range, Range::Loopback, "{text} is loopback");
        let message = refused.to_string();
        assert!(
            message.contains("http_allow_loopback") && message.contains("CAIRN_HTTP_ALLOW_LOOPBACK"),
            "the refusal names the setting that allows it: {message}"
        );
        assert!(private.check_url(&url(text)).is_err(), "allowing private networks does not allow {text}");
        assert_eq!(loopback.check_url(&url(text)), Ok(()), "allow_loopback allows {text}");
    }
}

#[test]
fn private_ranges_are_refused_in_every_encoding_unless_private_is_allowed() {
    let loopback = AddressPolicy { allow_loopback: true, ..AddressPolicy::default() };
    let private = AddressPolicy { allow_private: true, ..AddressPolicy::default() };
    for text in PRIVATE {
        let refused = AddressPolicy::default().check_url(&url(text)).expect_err(text);
        assert_eq!(refused.range, Range::Private, "{text} is private");
        let message = refused.to_string();
        assert!(
            message.contains("http_allow_private") && message.contains("CAIRN_HTTP_ALLOW_PRIVATE"),
            "the refusal names the setting that allows it: {message}"
        );
        assert!(loopback.check_url(&url(text)).is_err(), "allowing loopback does not allow {text}");
        assert_eq!(private.check_url(&url(text)), Ok(()), "allow_private allows {text}");
    }
}

#[test]
fn public_destinations_are_always_allowed() {
    for text in PUBLIC {
        assert_eq!(AddressPolicy::default().check_url(&url(text)), Ok(()), "{text} is public");
    }
}

#[test]
fn a_listed_host_is_allowed_on_its_port_only() {
    let policy = AddressPolicy { allow_hosts: hosts(&["127.0.0.1:8080", "[::1]", "10.1.2.3"]), ..Default::default() };

    assert_eq!(policy.check_url(&url("http://127.0.0.1:8080/")), Ok(()), "the listed port");
    assert!(policy.check_url(&url("http://127.0.0.1:8081/")).is_err(), "another port of a host listed with a port");
    assert!(policy.check_url(&url("http://127.0.0.2:8080/")).is_err(), "another loopback address");
    assert_eq!(policy.check_url(&url("http://[::1]:9999/")), Ok(()), "a host listed without a port: any port");
    assert_eq!(policy.check_url(&url("https://167838211/")), Ok(()), "10.1.2.3 however the URL writes it");
    assert!(policy.check_url(&url("http://10.1.2.4/")).is_err(), "only the listed private address");
}

#[test]
fn a_listed_name_allows_what_it_resolves_to_on_its_port() {
    let policy = AddressPolicy { allow_hosts: hosts(&["Svc.Internal.:8443", "db.internal"]), ..Default::default() };
    let private: IpAddr = "10.0.0.5".parse().expect("an IP");
    let loopback: IpAddr = "127.0.0.1".parse().expect("an IP");
    let link_local: IpAddr = "169.254.169.254".parse().expect("an IP");

    assert_eq!(policy.check_address(Some("svc.internal"), private, Some(8443)), Ok(()));
    assert_eq!(policy.check_address(Some("SVC.INTERNAL."), loopback, Some(8443)), Ok(()));
    assert_eq!(policy.check_address(Some("svc.internal"), private, Some(80)), Err(Range::Private));
    assert_eq!(policy.check_address(Some("svc.internal"), private, None), Err(Range::Private), "port unknown");
    assert_eq!(policy.check_address(Some("db.internal"), private, None), Ok(()), "listed without a port");
    assert_eq!(policy.check_address(Some("db.internal"), link_local, Some(80)), Err(Range::LinkLocal));
    assert_eq!(policy.check_address(Some("other.internal"), private, Some(8443)), Err(Range::Private));
}

#[test]
fn allow_hosts_entries_are_read_as_urls_read_hosts() {
    let read = |text: &str| text.parse::<AllowedHost>().map(|h| h.to_string());

    assert_eq!(read("LOCALHOST.:80"), Ok("localhost:80".into()), "names are lower-cased, the dot dropped");
    assert_eq!(read("2130706433"), Ok("127.0.0.1".into()), "numeric IPv4 forms are normalised");
    assert_eq!(read("::1"), Ok("[::1]".into()), "a bare IPv6 address has no port");
    assert_eq!(read("[::ffff:7f00:1]:8080"), Ok("[::ffff:127.0.0.1]:8080".into()));
    assert_eq!(read(" svc.internal:8443 "), Ok("svc.internal:8443".into()), "surrounding blanks are ignored");
    for bad in ["", "a:b", "http://x", "x/y", "[::1", "[::1]8080", "host:99999", "user@host", "a b"] {
        assert!(read(bad).is_err(), "`{bad}` is refused");
    }
}

fn name(text: &str) -> Name {
    text.parse().expect("a DNS name")
}

#[tokio::test]
async fn the_resolver_refuses_a_name_that_resolves_to_loopback_unless_allowed() {
    let strict = GuardedResolver::new(Arc::new(AddressPolicy::default()));
    let error = strict.resolve(name("localhost")).await.err().expect("localhost is loopback");
    let refused = find_refused(error.as_ref()).expect("a refusal");
    assert_eq!(refused.range, Range::Loopback);
    assert!(refused.destination.starts_with("localhost"), "the refusal names the host: {refused}");

    let allowed = GuardedResolver::new(Arc::new(AddressPolicy { allow_loopback: true, ..Default::default() }));
    let addrs: Vec<SocketAddr> = allowed.resolve(name("localhost")).await.expect("allowed").collect();
    assert!(addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty(), "{addrs:?}");

    let metadata = allowed.resolve(name("metadata.google.internal")).await.err().expect("a metadata name");
    assert_eq!(find_refused(metadata.as_ref()).map(|r| r.range), Some(Range::LinkLocal));
}

#[tokio::test]
async fn the_resolver_learns_the_port_of_the_destination_being_connected() {
    let listed =
        GuardedResolver::new(Arc::new(AddressPolicy { allow_hosts: hosts(&["localhost:8080"]), ..Default::default() }));

    // `resolve` is called inside the scope, as reqwest calls it inside the request's future.
    let on_listed_port =
        guarded(&url("http://localhost:8080/"), async { listed.resolve(name("localhost")).await }).await;
    assert!(on_listed_port.is_ok(), "localhost:8080 is listed");
    let on_other_port =
        guarded(&url("http://localhost:9090/"), async { listed.resolve(name("localhost")).await }).await;
    assert!(on_other_port.is_err(), "localhost:9090 is not");
    assert!(listed.resolve(name("localhost")).await.is_err(), "outside a request the port is unknown: refused");

    let redirected = guarded(&url("http://localhost:9090/"), async {
        note_destination(&url("http://localhost:8080/next"));
        listed.resolve(name("localhost")).await
    })
    .await;
    assert!(redirected.is_ok(), "a redirect moves the destination the resolver sees");
}
