//! Adaptive compression on the real kernel: src -- comp -- decomp -- dst, relayd
//! compressing on comp's FORWARD hook and decompressing on decomp's. Needs root.

mod support;

use relay_testbed::line4;
use std::net::UdpSocket;
use std::time::Duration;
use support::*;

fn compressor(algorithm: &str, mode: &str) -> String {
    format!(
        r#"
[[queue]]
num = 0
hook = "forward"
services = ["c"]

[service.c]
kind = "compress"
algorithm = "{algorithm}"
mode = "{mode}"
"#
    )
}

const DECOMPRESSOR: &str = r#"
[[queue]]
num = 0
hook = "forward"
match = "-p 108"
services = ["d"]

[service.d]
kind = "decompress"
"#;

fn counters(r: &Relayd, service: &str) -> std::collections::BTreeMap<String, u64> {
    let st = r.status();
    st.services
        .into_iter()
        .find(|s| s.name == service)
        .unwrap()
        .counters
}

#[test]
fn round_trip_through_two_relays_restores_every_byte() {
    for alg in ["deflate", "lz4", "lzo"] {
        let l = line4(&format!("ipcomp-{alg}"));
        let c = Relayd::start(&l.comp, &compressor(alg, "always"));
        let d = Relayd::start(&l.decomp, DECOMPRESSOR);
        // UDP: compare every datagram's bytes at the far end.
        let rx = l.dst.run(|| UdpSocket::bind("10.0.3.2:5000").unwrap());
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let text = b"relayd compresses this payload because it repeats itself. ";
        let sent: Vec<Vec<u8>> = (0..100u32)
            .map(|i| {
                let mut p: Vec<u8> = (0..1200).map(|j| text[j % text.len()]).collect();
                p[..4].copy_from_slice(&i.to_be_bytes());
                p
            })
            .collect();
        let expect = sent.clone();
        // Receive while sending: 100 datagrams would overrun a default socket buffer.
        let receiver = std::thread::spawn(move || {
            let mut buf = [0u8; 2000];
            for (i, p) in expect.iter().enumerate() {
                let (n, _) = rx
                    .recv_from(&mut buf)
                    .unwrap_or_else(|e| panic!("datagram {i} lost: {e}"));
                assert_eq!(&buf[..n], &p[..], "datagram {i} changed on the way");
            }
        });
        let to_send = sent.clone();
        l.src.run(move || {
            let s = UdpSocket::bind("10.0.1.1:0").unwrap();
            for p in &to_send {
                s.send_to(p, "10.0.3.2:5000").unwrap();
                std::thread::sleep(Duration::from_micros(300));
            }
        });
        receiver
            .join()
            .unwrap_or_else(|_| panic!("{alg}: UDP round trip failed"));
        // TCP (checksums verified by dst's kernel): a compressible bulk transfer completes.
        let listener = l
            .dst
            .run(|| std::net::TcpListener::bind("10.0.3.2:6000").unwrap());
        let sink = std::thread::spawn(move || relay_traffic::tcp_sink(listener).unwrap());
        let (tx, _) = l.src.run(|| {
            relay_traffic::tcp_send_ratio(addr("10.0.3.2:6000"), Duration::from_millis(500), 0.5)
                .unwrap()
        });
        assert_eq!(sink.join().unwrap(), tx, "{alg}: TCP bytes lost");
        // IPv6: a compressible ping.
        let out = l.src.exec(&[
            "ping",
            "-6",
            "-c",
            "2",
            "-i",
            "0.2",
            "-s",
            "1000",
            "-p",
            "61",
            "fd00:3::2",
        ]);
        assert!(
            out.status.success(),
            "{alg}: ping6 failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cc = counters(&c, "c");
        let dc = counters(&d, "d");
        assert!(cc["compressed"] >= 100, "{alg}: {cc:?}");
        assert!(cc["bytes_out"] < cc["bytes_in"] / 2, "{alg}: {cc:?}");
        assert_eq!(
            dc["decompressed"], cc["compressed"],
            "{alg}: {dc:?} vs {cc:?}"
        );
        assert_eq!(dc["dropped_corrupt"], 0);
        let q = c.status().queues[0].clone();
        assert!(!q.gso, "a compressing queue must see MTU-sized packets");
        assert_eq!(q.copy_range, 0xffff);
        assert_eq!(q.errors, 0, "{q:?}");
    }
}

#[test]
fn corrupt_ipcomp_is_counted_and_dropped() {
    let l = line4("ipcomp-corrupt");
    let d = Relayd::start(&l.decomp, DECOMPRESSOR);
    let garbage: Vec<Vec<u8>> = (0..5u8)
        .map(|k| {
            // IPv4, protocol 108, IPComp header (UDP, CPI 2), then bytes that are no DEFLATE.
            let mut p = vec![
                0x45, 0, 0, 0, 0, 9, 0, 0, 64, 108, 0, 0, 10, 0, 1, 1, 10, 0, 3, 2,
            ];
            p.extend_from_slice(&[17, 0, 0, 2]);
            p.extend((0..200).map(|i| (i as u8).wrapping_mul(k + 7) ^ 0xff));
            let len = p.len() as u16;
            p[2..4].copy_from_slice(&len.to_be_bytes());
            p
        })
        .collect();
    l.src.run(move || {
        // SAFETY: raw socket calls on live buffers.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW);
            assert!(fd >= 0);
            for p in &garbage {
                let mut sa: libc::sockaddr_in = std::mem::zeroed();
                sa.sin_family = libc::AF_INET as u16;
                sa.sin_addr.s_addr = u32::from_ne_bytes([10, 0, 3, 2]);
                let r = libc::sendto(
                    fd,
                    p.as_ptr() as *const libc::c_void,
                    p.len(),
                    0,
                    &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as u32,
                );
                assert!(r > 0);
            }
            libc::close(fd);
        }
    });
    assert!(
        wait_for(
            Duration::from_secs(5),
            || counters(&d, "d")["dropped_corrupt"] == 5
        ),
        "{:?}\n{}",
        counters(&d, "d"),
        d.log()
    );
    assert!(
        d.log().contains("dropping IPComp packet (corrupt)"),
        "{}",
        d.log()
    );
    assert_eq!(d.status().queues[0].dropped, 5);
    assert!(
        l.src.ping("10.0.3.2"),
        "relayd must keep serving after corrupt input"
    );
}
