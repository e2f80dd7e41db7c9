//! Tests of the destination policy.

use super::*;

fn rules(list: &[&str]) -> Vec<DestRule> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// The decision with the given lists and no own address.
fn d(allow: &[&str], deny: &[&str], dst: &str) -> Result<(), Refusal> {
    decide(&rules(allow), &rules(deny), |_| false, sa(dst))
}

#[test]
fn every_special_range_is_refused_by_default() {
    for dst in [
        "127.0.0.1:22",
        "127.255.255.254:80",
        "0.0.0.0:80",
        "0.1.2.3:80",
        "169.254.169.254:80",
        "224.0.0.1:80",
        "239.255.255.250:1900",
        "240.0.0.1:80",
        "255.255.255.255:80",
        "[::1]:22",
        "[::]:80",
        "[::127.0.0.1]:80",
        "[fe80::1]:80",
        "[febf::1]:80",
        "[ff02::1]:80",
        // IPv4-mapped forms.
        "[::ffff:127.0.0.1]:22",
        "[::ffff:0.0.0.0]:22",
        "[::ffff:169.254.169.254]:80",
        "[::ffff:224.0.0.1]:80",
        "[::ffff:255.255.255.255]:80",
        // NAT64 forms.
        "[64:ff9b::127.0.0.1]:22",
        "[64:ff9b::169.254.169.254]:80",
    ] {
        assert!(
            matches!(d(&[], &[], dst), Err(Refusal::Special(_))),
            "{dst}: {:?}",
            d(&[], &[], dst)
        );
    }
    for dst in [
        "10.0.2.2:80",
        "192.168.1.1:443",
        "126.255.255.255:80",
        "128.0.0.1:80",
        "169.253.0.1:80",
        "223.255.255.255:80",
        "[2001:db8::1]:80",
        "[fd00::1]:80",
        "[fec0::1]:80",
        "[::1:0:0:1]:80",
        "[::ffff:10.0.2.2]:80",
        "[64:ff9b::10.0.2.2]:80",
    ] {
        assert_eq!(d(&[], &[], dst), Ok(()), "{dst}");
    }
}

#[test]
fn ipv6_metadata_and_local_use_nat64_are_refused_by_default() {
    // The IPv6 cloud metadata address, like 169.254.169.254; only that address.
    assert_eq!(
        d(&[], &[], "[fd00:ec2::254]:80"),
        Err(Refusal::Special("cloud metadata (fd00:ec2::254)"))
    );
    for ok in [
        "[fd00:ec2::253]:80",
        "[fd00:ec2::1:254]:80",
        "[fd00::254]:80",
    ] {
        assert_eq!(d(&[], &[], ok), Ok(()), "{ok}");
    }
    // Local-use NAT64 (RFC 8215): the embedded IPv4 address is checked, as in
    // 64:ff9b::/96, anywhere in 64:ff9b:1::/48.
    for (dst, what) in [
        ("[64:ff9b:1::127.0.0.1]:22", "loopback"),
        ("[64:ff9b:1:ffff:ffff:ffff:a9fe:a9fe]:80", "link-local"),
        ("[64:ff9b:1:abcd::0.0.0.0]:80", "unspecified (0.0.0.0/8)"),
        ("[64:ff9b:1::224.0.0.1]:80", "multicast"),
    ] {
        assert_eq!(d(&[], &[], dst), Err(Refusal::Special(what)), "{dst}");
    }
    for ok in [
        "[64:ff9b:1::10.0.2.2]:80",
        "[64:ff9b:1:abcd::192.0.2.1]:80",
        // Outside the /48: ordinary addresses.
        "[64:ff9b:2::127.0.0.1]:80",
        "[64:ff9a:1::127.0.0.1]:80",
    ] {
        assert_eq!(d(&[], &[], ok), Ok(()), "{ok}");
    }
    // Re-allowed only from inside the NAT64 form of the range.
    let one = ["[64:ff9b:1:abcd::127.0.0.1]:8080"];
    assert_eq!(d(&one, &[], "[64:ff9b:1:abcd::127.0.0.1]:8080"), Ok(()));
    assert!(d(&one, &[], "[64:ff9b:1:abcd::127.0.0.1]:22").is_err());
    assert!(d(&one, &[], "[64:ff9b:1:abce::127.0.0.1]:8080").is_err());
    assert!(d(&["64:ff9b:1::/48"], &[], "[64:ff9b:1::127.0.0.1]:80").is_err());
    assert_eq!(
        d(
            &["64:ff9b:1:abcd::7f00:0/104"],
            &[],
            "[64:ff9b:1:abcd::7f01:203]:80"
        ),
        Ok(())
    );
    assert_eq!(d(&["fd00:ec2::254"], &[], "[fd00:ec2::254]:80"), Ok(()));
}

#[test]
fn transparent_refuses_the_relay_itself_and_what_is_never_forwarded() {
    for dst in [
        "[::]:80",
        "0.0.0.0:80",
        "[::1]:80",
        "127.0.0.1:80",
        "127.9.9.9:80",
        "[::ffff:127.0.0.1]:80",
        "[::ffff:0.0.0.0]:80",
        "[::127.0.0.1]:80",
        "169.254.169.254:80",
        "[fe80::1]:80",
        "[fd00:ec2::254]:80",
        "224.0.0.1:80",
        "[ff02::1]:80",
        "255.255.255.255:80",
        "[64:ff9b::127.0.0.1]:80",
        "[64:ff9b:1::127.0.0.1]:80",
    ] {
        assert!(
            matches!(check_transparent(sa(dst), 0), Err(Refusal::Special(_))),
            "{dst}: {:?}",
            check_transparent(sa(dst), 0)
        );
    }
    // Forwarded destinations, including the reserved 240/4 Linux forwards and NAT64.
    for dst in [
        "192.0.2.1:80",
        "[2001:db8::1]:80",
        "240.0.0.1:80",
        "[64:ff9b::192.0.2.1]:80",
        "[::ffff:192.0.2.1]:80",
    ] {
        assert_eq!(check_transparent(sa(dst), 0), Ok(()), "{dst}");
    }
    // One of this host's own addresses, when it has one outside the special ranges.
    if let Some(own) = local_addresses()
        .unwrap()
        .into_iter()
        .find(|a| special(*a).is_none())
    {
        assert_eq!(
            check_transparent(SocketAddr::new(own, 80), 0),
            Err(Refusal::Local),
            "{own}"
        );
    }
}

#[test]
fn own_addresses_are_refused_unless_named() {
    let own = |ip: IpAddr| ip == "10.0.1.2".parse::<IpAddr>().unwrap();
    let check = |allow: &[&str], dst: &str| decide(&rules(allow), &[], own, sa(dst));
    assert_eq!(check(&[], "10.0.1.2:22"), Err(Refusal::Local));
    assert_eq!(check(&[], "[::ffff:10.0.1.2]:22"), Err(Refusal::Local));
    assert_eq!(check(&[], "10.0.1.3:22"), Ok(()));
    // A prefix that holds the address does not re-allow it; the address itself does.
    assert_eq!(check(&["10.0.1.0/24"], "10.0.1.2:22"), Err(Refusal::Local));
    assert_eq!(check(&["10.0.1.0/24"], "10.0.1.3:22"), Ok(()));
    assert_eq!(check(&["10.0.1.2:8080"], "10.0.1.2:8080"), Ok(()));
    assert_eq!(
        check(&["10.0.1.2:8080"], "10.0.1.2:22"),
        Err(Refusal::Local)
    );
}

#[test]
fn allow_re_allows_a_special_range_only_from_inside_it() {
    assert_eq!(d(&["127.0.0.1:8080"], &[], "127.0.0.1:8080"), Ok(()));
    assert_eq!(
        d(&["127.0.0.1:8080"], &[], "[::ffff:127.0.0.1]:8080"),
        Ok(())
    );
    assert!(d(&["127.0.0.1:8080"], &[], "127.0.0.1:22").is_err());
    assert!(d(&["127.0.0.1:8080"], &[], "127.0.0.2:8080").is_err());
    assert_eq!(d(&["127.0.0.0/8"], &[], "127.9.9.9:1"), Ok(()));
    assert_eq!(d(&["::ffff:127.0.0.0/104"], &[], "127.9.9.9:1"), Ok(()));
    assert_eq!(d(&["[::1]:631"], &[], "[::1]:631"), Ok(()));
    assert_eq!(d(&["fe80::/10"], &[], "[fe80::1]:80"), Ok(()));
    // Wide entries do not open the special ranges.
    for wide in ["0.0.0.0/0", "*", "*:8080", "::/0", "126.0.0.0/7"] {
        assert_eq!(
            d(&[wide], &[], "127.0.0.1:8080"),
            Err(Refusal::Special("loopback")),
            "{wide}"
        );
    }
    assert!(d(&["::/0"], &[], "[::1]:8080").is_err());
    assert!(d(&["::/96"], &[], "[::1]:8080").is_err());
}

#[test]
fn deny_wins_and_allow_makes_an_allow_list() {
    // deny before allow, even when allow names the destination exactly.
    assert!(matches!(
        d(&["10.0.2.2"], &["10.0.0.0/8"], "10.0.2.2:80"),
        Err(Refusal::Denied(_))
    ));
    assert!(matches!(
        d(&["127.0.0.1"], &["127.0.0.1:22"], "127.0.0.1:22"),
        Err(Refusal::Denied(_))
    ));
    assert_eq!(d(&["127.0.0.1"], &["127.0.0.1:22"], "127.0.0.1:80"), Ok(()));
    // With allow entries, everything else is refused.
    assert_eq!(d(&["10.0.0.0/8"], &[], "10.9.9.9:80"), Ok(()));
    assert_eq!(
        d(&["10.0.0.0/8"], &[], "192.0.2.1:80"),
        Err(Refusal::NotAllowed)
    );
    assert_eq!(
        d(&["10.0.0.0/8"], &[], "[2001:db8::1]:80"),
        Err(Refusal::NotAllowed)
    );
    // Without, everything not special and not denied is allowed.
    assert_eq!(d(&[], &["*:25"], "192.0.2.1:80"), Ok(()));
    assert!(d(&[], &["*:25"], "192.0.2.1:25").is_err());
    assert!(d(&[], &["*:25"], "[2001:db8::1]:25").is_err());
    // An IPv4 deny covers the IPv4-mapped form.
    assert!(d(&[], &["192.0.2.0/24"], "[::ffff:192.0.2.7]:80").is_err());
}

#[test]
fn ports_and_ranges() {
    assert_eq!(d(&["192.0.2.1:443"], &[], "192.0.2.1:443"), Ok(()));
    assert!(d(&["192.0.2.1:443"], &[], "192.0.2.1:444").is_err());
    let r = ["[2001:db8::]/32:80-90"];
    assert!(d(&r, &[], "[2001:db8::1]:79").is_err());
    assert_eq!(d(&r, &[], "[2001:db8::1]:80"), Ok(()));
    assert_eq!(d(&r, &[], "[2001:db8:ffff::1]:90"), Ok(()));
    assert!(d(&r, &[], "[2001:db8::1]:91").is_err());
    assert!(d(&r, &[], "[2001:db9::1]:80").is_err());
    assert!(d(&r, &[], "10.0.0.1:80").is_err());
}

#[test]
fn grammar_round_trips_and_refuses_typos() {
    for (s, canon) in [
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("192.0.2.1", "192.0.2.1"),
        ("192.0.2.1/32", "192.0.2.1"),
        ("192.0.2.1:443", "192.0.2.1:443"),
        ("192.0.2.0/24:1-1024", "192.0.2.0/24:1-1024"),
        ("2001:db8::/32", "2001:db8::/32"),
        ("2001:db8::1", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("[2001:db8::1]:443", "[2001:db8::1]:443"),
        ("[2001:db8::]/32:80-90", "[2001:db8::]/32:80-90"),
        ("::1", "::1"),
        ("::", "::"),
        ("::/0", "::/0"),
        ("*", "*"),
        ("*:25", "*:25"),
        ("*:80-80", "*:80"),
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
        (" 10.0.0.0/8 ", "10.0.0.0/8"),
    ] {
        let r: DestRule = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(r.to_string(), canon, "{s}");
        assert_eq!(canon.parse::<DestRule>().unwrap(), r, "{canon}");
    }
    for (s, why) in [
        ("", "not an IP"),
        ("10.0.0.1/8", "host bits"),
        ("10.0.0.0/33", "0 to 32"),
        ("2001:db8::/129", "0 to 128"),
        ("2001:db8::/32:80", "brackets"),
        ("[10.0.0.1]:80", "IPv6 addresses only"),
        ("[2001:db8::1:80", "missing `]`"),
        ("10.0.0.1:0", "1 to 65535"),
        ("10.0.0.1:65536", "1 to 65535"),
        ("10.0.0.1:90-80", "LOW <= HIGH"),
        ("10.0.0.1:", "1 to 65535"),
        ("10.0.0.1:+80", "1 to 65535"),
        ("*/8", "no prefix length"),
        ("example.org", "not an IP"),
        ("10.0.0.0/8x", "0 to 32"),
        ("[2001:db8::1]x", "expected"),
    ] {
        let e = s.parse::<DestRule>().unwrap_err();
        assert!(e.contains(why), "{s}: {e}");
    }
}

#[test]
fn serde_reads_and_writes_strings() {
    let v: Vec<DestRule> = serde_json::from_str(r#"["10.0.0.0/8","[::1]:80"]"#).unwrap();
    assert_eq!(
        serde_json::to_string(&v).unwrap(),
        r#"["10.0.0.0/8","[::1]:80"]"#
    );
    let e = serde_json::from_str::<Vec<DestRule>>(r#"["10.0.0.1/8"]"#).unwrap_err();
    assert!(e.to_string().contains("host bits"), "{e}");
}

#[test]
fn local_addresses_include_loopback_and_the_route_probe_sees_them() {
    let all = local_addresses().unwrap();
    assert!(all.iter().any(|a| a.is_loopback()), "{all:?}");
    assert!(routes_to_self(IpAddr::V4(Ipv4Addr::LOCALHOST), 0));
    // A documentation address is never local (and may have no route at all).
    assert!(!routes_to_self("192.0.2.1".parse().unwrap(), 0));
}

#[test]
fn log_limit_lets_one_line_a_second() {
    let l = LogLimit::default();
    let t0 = Instant::now();
    assert_eq!(l.ready_at(t0), Some(0));
    assert_eq!(l.ready_at(t0), None);
    assert_eq!(l.ready_at(t0), None);
    assert_eq!(l.ready_at(t0 + std::time::Duration::from_secs(1)), Some(2));
    assert_eq!(l.ready(), None);
}
