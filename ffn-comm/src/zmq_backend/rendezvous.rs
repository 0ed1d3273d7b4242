//! The rendezvous of the zmq backend: rank 0 collects every rank's hello and answers with the
//! table of data endpoints (or a refusal saying what did not match).
//!
//! Both sides are CURVE sockets of the job ([`super::curve`]): a process without the job secret
//! never gets a hello through. A rank whose own secret differs sees its handshakes refused and
//! fails with [`CommError::Refused`] naming the job token; rank 0 warns about such connections.

use super::curve::{Keys, Monitor};
use super::zerr;
use crate::stall::StallClock;
use crate::zmq_wire::{Hello, Refusal, Reply, Route, hello_limit, reply_limit};
use crate::{CommError, CommOptions};
use std::time::{Duration, Instant};

/// Handshakes refused, with none accepted, before a rank concludes that rank 0 does not accept
/// its secret (libzmq retries every 100 ms).
const REFUSED_HANDSHAKES: usize = 3;
/// Frames rank 0 reads of one message (identity and hello); the rest are dropped unread.
const HELLO_FRAMES: usize = 2;

/// `tcp://host:port` (brackets around an IPv6 address), and whether the host is IPv6.
pub(crate) fn tcp_endpoint(host: &str, port: &str) -> (String, bool) {
    let v6 = host.contains(':');
    if v6 && !host.starts_with('[') {
        (format!("tcp://[{host}]:{port}"), true)
    } else {
        (format!("tcp://{host}:{port}"), v6)
    }
}

/// The address rank 0 binds the rendezvous to: `FFN_COMM_MASTER_BIND` when set (a wildcard
/// there is the user's explicit choice), else `MASTER_ADDR` resolved to one IP address, never a
/// wildcard.
fn bind_host(opts: &CommOptions) -> Result<String, CommError> {
    if let Some(b) = &opts.master_bind {
        return Ok(b.clone());
    }
    let host = opts.master_addr.trim();
    if crate::env::is_wildcard(host) {
        return Err(crate::env::wildcard_master_addr(host));
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<std::net::IpAddr>().is_ok() {
        return Ok(bare.to_string());
    }
    use std::net::ToSocketAddrs;
    let resolved = (bare, opts.master_port)
        .to_socket_addrs()
        .map_err(|e| CommError::io(format!("rank 0: resolving MASTER_ADDR={host}"), e))?
        .map(|a| a.ip())
        .find(|ip| !ip.is_unspecified());
    resolved
        .map(|ip| ip.to_string())
        .ok_or_else(|| CommError::Env {
            var: "MASTER_ADDR".into(),
            expected: "a host name that resolves to an address of rank 0".into(),
            found: host.into(),
        })
}

/// Reads one message of at most `max` frames from `s` (each bounded by `ZMQ_MAXMSGSIZE`); frames
/// past `max` are dropped. Returns the frames kept and the number of frames.
fn recv_frames(s: &zmq::Socket, max: usize) -> Result<(Vec<Vec<u8>>, usize), zmq::Error> {
    let mut frames = Vec::new();
    let mut count = 0;
    let mut scratch = zmq::Message::new();
    loop {
        if frames.len() < max {
            frames.push(s.recv_bytes(zmq::DONTWAIT)?);
        } else {
            s.recv(&mut scratch, zmq::DONTWAIT)?;
        }
        count += 1;
        if !s.get_rcvmore()? {
            return Ok((frames, count));
        }
    }
}

/// Rank 0: accepts the other ranks and returns every data route of the job.
pub(crate) fn serve(
    ctx: &zmq::Context,
    opts: &CommOptions,
    keys: &Keys,
    ours: Hello,
) -> Result<Vec<Route>, CommError> {
    let router = ctx
        .socket(zmq::ROUTER)
        .map_err(zerr("creating the rendezvous socket"))?;
    keys.server(&router)?;
    router
        .set_maxmsgsize(hello_limit(ours.size) as i64)
        .map_err(zerr("setting ZMQ_MAXMSGSIZE"))?;
    router
        .set_linger(2000)
        .map_err(zerr("setting ZMQ_LINGER"))?;
    let host = bind_host(opts)?;
    let (addr, v6) = tcp_endpoint(&host, &opts.master_port.to_string());
    router.set_ipv6(v6).map_err(zerr("setting ZMQ_IPV6"))?;
    let mut monitor = Monitor::new(ctx, &router, "rendezvous")?;
    router.bind(&addr).map_err(zerr(format!(
        "rank 0: binding the rendezvous at {addr} (MASTER_ADDR, MASTER_PORT, FFN_COMM_MASTER_BIND)"
    )))?;
    let n = ours.size;
    let mut taken = vec![false; n];
    taken[0] = true;
    let mut ids: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut table: Vec<Route> = ours
        .endpoints
        .iter()
        .map(|(q, e)| Route {
            rank: 0,
            peer: *q,
            endpoint: e.clone(),
        })
        .collect();
    let mut clock = StallClock::new(0, "connect", opts);
    let mut warned: Option<Instant> = None;
    while taken.iter().any(|t| !t) {
        let wait = clock.until_next_check().as_millis().clamp(1, 1000) as i64;
        let mut items = [router.as_poll_item(zmq::POLLIN), monitor.poll_item()];
        zmq::poll(&mut items, wait).map_err(zerr("rank 0: waiting for hellos"))?;
        let hello_ready = items[0].is_readable();
        if monitor.drain() > 0 && warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
            warned = Some(Instant::now());
            crate::stall::warn(format!(
                "ffn-comm: rank 0: refused {} connection(s) to the rendezvous at {addr}: they did \
                 not prove the job secret (a rank with another FFN_COMM_TOKEN, or not an ffn-comm rank)",
                monitor.failed
            ));
        }
        if !hello_ready {
            clock.check(|| (1..n).filter(|&q| !taken[q]).collect())?;
            continue;
        }
        let (frames, count) =
            recv_frames(&router, HELLO_FRAMES).map_err(zerr("rank 0: receiving a hello"))?;
        let [id, body] = <[Vec<u8>; 2]>::try_from(frames).unwrap_or_default();
        let hello = if count == HELLO_FRAMES {
            Hello::decode(&body).map_err(Refusal::from)
        } else {
            Err(Refusal {
                field: "hello",
                expected: "one frame".into(),
                actual: format!("{} frames", count.saturating_sub(1)),
            })
        };
        match hello.and_then(|h| h.refusal(&ours, &taken).map_or(Ok(h), Err)) {
            Err(r) => {
                crate::stall::warn(format!(
                    "ffn-comm: rank 0: refused a peer claiming rank {}: {} mismatch: expected {}, found {}",
                    Hello::decode(&body).map_or("?".into(), |h| h.rank.to_string()),
                    r.field,
                    r.expected,
                    r.actual
                ));
                router
                    .send_multipart([id, Reply::Refused(r).encode()], 0)
                    .map_err(zerr("rank 0: refusing a peer"))?;
            }
            Ok(h) => {
                taken[h.rank] = true;
                ids[h.rank] = id;
                table.extend(h.endpoints.iter().map(|(q, e)| Route {
                    rank: h.rank,
                    peer: *q,
                    endpoint: e.clone(),
                }));
            }
        }
    }
    let msg = Reply::Table(table.clone()).encode();
    for id in ids.iter().skip(1) {
        router
            .send_multipart([id.as_slice(), msg.as_slice()], 0)
            .map_err(zerr("rank 0: sending the endpoint table"))?;
    }
    Ok(table)
}

/// Ranks 1..: registers with rank 0 and returns every data route of the job.
pub(crate) fn join(
    ctx: &zmq::Context,
    opts: &CommOptions,
    keys: &Keys,
    hello: &Hello,
) -> Result<Vec<Route>, CommError> {
    let me = hello.rank;
    let dealer = ctx
        .socket(zmq::DEALER)
        .map_err(zerr("creating the rendezvous socket"))?;
    keys.client(&dealer)?;
    dealer
        .set_maxmsgsize(reply_limit(hello.size) as i64)
        .map_err(zerr("setting ZMQ_MAXMSGSIZE"))?;
    dealer.set_linger(0).map_err(zerr("setting ZMQ_LINGER"))?;
    let (addr, v6) = tcp_endpoint(&opts.master_addr, &opts.master_port.to_string());
    dealer.set_ipv6(v6).map_err(zerr("setting ZMQ_IPV6"))?;
    let mut monitor = Monitor::new(ctx, &dealer, "join")?;
    dealer.connect(&addr).map_err(zerr(format!(
        "rank {me}: connecting to rank 0 at {addr} (MASTER_ADDR, MASTER_PORT)"
    )))?;
    dealer
        .send(hello.encode(), 0)
        .map_err(zerr(format!("rank {me}: sending the hello to {addr}")))?;
    let mut clock = StallClock::new(me, "connect", opts);
    loop {
        let wait = clock.until_next_check().as_millis().clamp(1, 1000) as i64;
        let mut items = [dealer.as_poll_item(zmq::POLLIN), monitor.poll_item()];
        zmq::poll(&mut items, wait).map_err(zerr("waiting for rank 0"))?;
        let ready = items[0].is_readable();
        monitor.drain();
        if ready {
            break;
        }
        if monitor.succeeded == 0 && monitor.failed >= REFUSED_HANDSHAKES {
            return Err(CommError::Refused {
                rank: me,
                field: "job token",
                expected: "the job's FFN_COMM_TOKEN".into(),
                actual: format!(
                    "a secret that rank 0 at {addr} does not accept ({} CURVE handshakes refused)",
                    monitor.failed
                ),
            });
        }
        clock.check(|| vec![0])?;
    }
    let bad = |detail: String| CommError::Protocol {
        rank: me,
        peer: 0,
        detail,
    };
    let (frames, count) = recv_frames(&dealer, 1)
        .map_err(zerr(format!("rank {me}: receiving the endpoint table")))?;
    if count != 1 {
        return Err(bad(format!(
            "expected a one-frame reply to the hello, got {count} frames"
        )));
    }
    match Reply::decode(&frames[0], hello.size)
        .map_err(|e| bad(format!("reply to the hello: {e}")))?
    {
        Reply::Table(t) => Ok(t),
        Reply::Refused(r) => Err(CommError::Refused {
            rank: me,
            field: r.field,
            expected: r.expected,
            actual: r.actual,
        }),
    }
}
