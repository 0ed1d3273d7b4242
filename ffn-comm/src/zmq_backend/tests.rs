use super::*;
use crate::conformance;
use curve::Monitor;
use std::io::Write as _;
use std::time::{Duration, Instant};

const TOKEN: &str = "unit-test-secret-0123456789";

fn opts(port: u16, token: &str) -> CommOptions {
    CommOptions {
        timeout: Duration::from_secs(3),
        master_port: port,
        job_token: token.into(),
        ..CommOptions::default()
    }
}

fn quick(c: &mut ZmqComm) -> Result<u64, conformance::ConformanceError> {
    conformance::run_all(c, &conformance::SuiteOptions::quick()).map(|r| r.digest)
}

fn local_digest(n: usize) -> u64 {
    crate::local::LocalComm::run(n, |c| {
        conformance::run_all(c, &conformance::SuiteOptions::quick())
    })
    .unwrap()[0]
        .digest
}

#[test]
fn conformance_on_threads() {
    for n in [2usize, 3] {
        let o = opts(crate::free_loopback_port(), TOKEN);
        let digests: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|rank| {
                    let o = &o;
                    s.spawn(move || quick(&mut ZmqComm::connect(WorldInfo { rank, size: n }, o)?))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
        });
        assert!(
            digests.iter().all(|d| *d == local_digest(n)),
            "{n} ranks: {digests:x?}"
        );
    }
}

#[test]
fn a_wrong_token_is_refused() {
    let port = crate::free_loopback_port();
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            ZmqComm::connect(WorldInfo { rank: 0, size: 2 }, &opts(port, TOKEN))
                .err()
                .unwrap()
        });
        let start = Instant::now();
        let e = ZmqComm::connect(
            WorldInfo { rank: 1, size: 2 },
            &opts(port, "another-secret-0123456789"),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("rendezvous refused: job token mismatch"), "{e}");
        assert!(e.contains("CURVE handshakes refused"), "{e}");
        assert!(!e.contains("another-secret") && !e.contains(TOKEN), "{e}");
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "took {:?}",
            start.elapsed()
        );
        let e0 = h.join().unwrap().to_string();
        assert!(
            e0.contains("connect timed out") && e0.contains("rank(s) [1]"),
            "{e0}"
        );
    });
}

#[test]
fn a_multi_rank_job_without_a_secret_does_not_start() {
    for token in ["", "short"] {
        let e = ZmqComm::connect(
            WorldInfo { rank: 0, size: 2 },
            &opts(crate::free_loopback_port(), token),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            e.contains("FFN_COMM_TOKEN") && e.contains("at least 16"),
            "{e}"
        );
    }
    // A group of one has nobody to talk to and needs no secret.
    assert!(
        ZmqComm::connect(
            WorldInfo { rank: 0, size: 1 },
            &opts(crate::free_loopback_port(), "")
        )
        .is_ok()
    );
}

#[test]
fn wildcard_bind_addresses_are_refused_unless_asked_for() {
    let o = CommOptions {
        master_addr: "0.0.0.0".into(),
        ..opts(crate::free_loopback_port(), TOKEN)
    };
    let e = ZmqComm::connect(WorldInfo { rank: 0, size: 2 }, &o)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("MASTER_ADDR") && e.contains("FFN_COMM_MASTER_BIND"),
        "{e}"
    );
    let o = CommOptions {
        bind_addr: "*".into(),
        ..opts(crate::free_loopback_port(), TOKEN)
    };
    let e = ZmqComm::connect(WorldInfo { rank: 1, size: 2 }, &o)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("FFN_COMM_BIND"), "{e}");
}

#[test]
fn a_wrong_world_size_is_refused() {
    let port = crate::free_loopback_port();
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            ZmqComm::connect(WorldInfo { rank: 0, size: 2 }, &opts(port, TOKEN)).err()
        });
        let e = ZmqComm::connect(WorldInfo { rank: 1, size: 3 }, &opts(port, TOKEN))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("world size mismatch: expected 2, found 3"),
            "{e}"
        );
        assert!(h.join().unwrap().is_some());
    });
}

/// How a stranger talks to a socket of the job.
#[derive(Clone, Copy, Debug)]
enum Stranger {
    /// A raw TCP connection writing a plain ZMTP greeting and then bytes.
    RawTcp,
    /// A libzmq socket with the NULL mechanism (no security).
    Plain,
    /// A CURVE client with a key pair of its own and a wrong server key.
    WrongServerKey,
    /// A CURVE client that knows the job's server key (as if it had leaked) but not the client key:
    /// only the ZAP check stops it.
    LeakedServerKey,
}

const STRANGERS: [Stranger; 4] = [
    Stranger::RawTcp,
    Stranger::Plain,
    Stranger::WrongServerKey,
    Stranger::LeakedServerKey,
];

/// Sends `frames` to `endpoint` as `kind`; returns the socket (kept open) so that the test can
/// check that nothing came back, and its handshake monitor.
fn intrude(
    ctx: &zmq::Context,
    kind: Stranger,
    socket_type: zmq::SocketType,
    endpoint: &str,
    frames: &[Vec<u8>],
    name: &str,
) -> Option<(zmq::Socket, Monitor)> {
    if let Stranger::RawTcp = kind {
        let addr = endpoint.trim_start_matches("tcp://");
        let mut t = std::net::TcpStream::connect(addr).unwrap();
        // ZMTP 3.0 greeting, NULL mechanism, then a READY and a message frame with the payload.
        let mut g = vec![0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0];
        g.extend_from_slice(b"NULL");
        g.resize(64, 0);
        let _ = t.write_all(&g);
        for f in frames {
            let _ = t.write_all(&[0, f.len().min(255) as u8]);
            let _ = t.write_all(&f[..f.len().min(255)]);
        }
        std::thread::sleep(Duration::from_millis(100));
        return None;
    }
    let s = ctx.socket(socket_type).unwrap();
    s.set_linger(0).unwrap();
    match kind {
        Stranger::WrongServerKey => {
            let mine = zmq::CurveKeyPair::new().unwrap();
            let server = zmq::CurveKeyPair::new().unwrap();
            s.set_curve_serverkey(&server.public_key).unwrap();
            s.set_curve_publickey(&mine.public_key).unwrap();
            s.set_curve_secretkey(&mine.secret_key).unwrap();
        }
        Stranger::LeakedServerKey => {
            let mine = zmq::CurveKeyPair::new().unwrap();
            let keys = Keys::derive(TOKEN).unwrap();
            s.set_curve_serverkey(&keys.server_public()).unwrap();
            s.set_curve_publickey(&mine.public_key).unwrap();
            s.set_curve_secretkey(&mine.secret_key).unwrap();
        }
        _ => {}
    }
    let monitor = Monitor::new(ctx, &s, name).unwrap();
    s.connect(endpoint).unwrap();
    s.set_sndtimeo(200).unwrap();
    let _ = s.send_multipart(frames.iter().map(|f| f.as_slice()), 0);
    Some((s, monitor))
}

/// Waits up to `wait` for the stranger's handshake outcome; asserts that it never succeeded and
/// that nothing was received.
fn assert_shut_out(kind: Stranger, intruder: Option<(zmq::Socket, Monitor)>, wait: Duration) {
    let Some((s, mut monitor)) = intruder else {
        return;
    };
    let start = Instant::now();
    while start.elapsed() < wait {
        monitor.drain();
        if monitor.failed > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    monitor.drain();
    assert_eq!(
        monitor.succeeded, 0,
        "{kind:?}: a stranger completed a handshake"
    );
    if matches!(kind, Stranger::LeakedServerKey) {
        assert!(monitor.failed > 0, "{kind:?}: the ZAP refusal was not seen");
    }
    if s.get_socket_type().unwrap() == zmq::DEALER {
        assert_eq!(
            s.poll(zmq::POLLIN, 0).unwrap(),
            0,
            "{kind:?}: the stranger got a reply"
        );
    }
}

#[test]
fn strangers_cannot_join_the_rendezvous() {
    for kind in STRANGERS {
        let port = crate::free_loopback_port();
        let o = opts(port, TOKEN);
        let ctx = zmq::Context::new();
        // A hello that rank 0 would accept from rank 1, with endpoints of the stranger's own.
        let ep = "tcp://127.0.0.1:9".to_string();
        let hello = Hello {
            version: PROTOCOL_VERSION,
            size: 2,
            rank: 1,
            block: BLOCK_FLOATS * 4,
            endpoints: vec![(0, ep)],
        };
        let digests: Vec<u64> = std::thread::scope(|s| {
            let o = &o;
            let r0 =
                s.spawn(move || quick(&mut ZmqComm::connect(WorldInfo { rank: 0, size: 2 }, o)?));
            // Wait until rank 0 listens, then intrude before rank 1 arrives.
            let start = Instant::now();
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "rank 0 never listened"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            let ep = format!("tcp://127.0.0.1:{port}");
            let intruder = intrude(
                &ctx,
                kind,
                zmq::DEALER,
                &ep,
                &[hello.encode()],
                &format!("rv-{kind:?}"),
            );
            std::thread::sleep(Duration::from_millis(300));
            let r1 =
                s.spawn(move || quick(&mut ZmqComm::connect(WorldInfo { rank: 1, size: 2 }, o)?));
            let d = [r0, r1].map(|h| {
                h.join()
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{kind:?}: {e}"))
            });
            assert_shut_out(kind, intruder, Duration::from_secs(1));
            d.to_vec()
        });
        assert_eq!(digests, vec![local_digest(2); 2], "{kind:?}");
    }
}

#[test]
fn strangers_cannot_inject_into_data_sockets() {
    let keys = Keys::derive(TOKEN).unwrap();
    for kind in STRANGERS {
        let o = opts(crate::free_loopback_port(), TOKEN);
        let ctx = zmq::Context::new();
        let (tx, rx) = std::sync::mpsc::channel::<Vec<(usize, String)>>();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let sums: Vec<Vec<f32>> = std::thread::scope(|s| {
            let o = &o;
            let r0 = s.spawn(move || {
                let mut c = ZmqComm::connect(WorldInfo { rank: 0, size: 2 }, o)?;
                tx.send(c.endpoints().to_vec()).unwrap();
                let _ = go_rx.recv_timeout(Duration::from_secs(10));
                let mut buf = vec![1.0f32; 64];
                c.allreduce_sum(&mut buf)?;
                c.barrier()?;
                Ok::<_, CommError>(buf)
            });
            let r1 = s.spawn(move || {
                let mut c = ZmqComm::connect(WorldInfo { rank: 1, size: 2 }, o)?;
                let mut buf = vec![2.0f32; 64];
                c.allreduce_sum(&mut buf)?;
                c.barrier()?;
                Ok::<_, CommError>(buf)
            });
            // The message rank 0 expects next from rank 1 (job tag included, as if it had leaked),
            // with a payload that would show in the sum.
            let header = Header {
                tag: keys.tag,
                call: Call {
                    seq: 2,
                    op: OP_ALLREDUCE,
                    root: 0,
                    len: 64,
                },
            };
            let frames = vec![header.encode().to_vec(), vec![0x4e; 32 * 4]];
            // Owned here, so that a failed assertion below drops it and releases rank 0.
            let go_tx = go_tx;
            let endpoints = rx.recv().unwrap();
            let intruders: Vec<_> = endpoints
                .iter()
                .map(|(_, ep)| {
                    intrude(
                        &ctx,
                        kind,
                        zmq::PUSH,
                        ep,
                        &frames,
                        &format!("data-{kind:?}-{ep}"),
                    )
                })
                .collect();
            for i in intruders {
                assert_shut_out(kind, i, Duration::from_secs(1));
            }
            go_tx.send(()).unwrap();
            [r0, r1]
                .map(|h| {
                    h.join()
                        .unwrap()
                        .unwrap_or_else(|e| panic!("{kind:?}: {e}"))
                })
                .to_vec()
        });
        assert!(
            sums.iter().all(|b| b == &vec![3.0; 64]),
            "{kind:?}: {sums:?}"
        );
    }
}
