//! The `zmq` backend (feature `zmq`): ranks are processes that talk TCP through libzmq.
//!
//! # Rendezvous
//! Rank 0 binds a ROUTER socket at `MASTER_ADDR:MASTER_PORT`. Every rank binds one PULL socket per
//! peer on `FFN_COMM_BIND` (loopback by default, an ephemeral port each). Ranks 1.. connect a DEALER
//! to rank 0 and present a hello: protocol version, job token, world size, rank, message size and
//! their endpoints. Rank 0 refuses a hello with a wrong token, world size, protocol version, message
//! size or a rank already taken (the peer gets [`CommError::Refused`] saying what did not match),
//! and once every rank has registered it sends everybody the endpoint table. Every rank then
//! connects one PUSH socket per peer.
//!
//! # Allreduce
//! Reduce-scatter then allgather, both pipelined in blocks of at most 1 MiB with a few blocks in
//! flight: for each block, every rank sends the pieces that other ranks own, and the owner adds the
//! contributions in rank order (the fixed order shared by all backends); then the owners send their
//! sums to everybody. Each rank sends and receives `2 (n-1)/n` of the buffer, as in a ring. Every
//! message carries a header (job tag, operation number, operation, length), so mismatched calls are
//! reported as [`CommError::LengthMismatch`], and every socket refuses frames larger than the block
//! size announced in the handshake.
//!
//! # Failure
//! Every receive waits with a deadline: after the stall threshold a warning names the peer, after
//! the timeout the collective fails with [`CommError::Timeout`] naming it. Sends give up after the
//! timeout too.

use crate::reduce::{add_assign, as_bytes_mut, chunk_range};
use crate::stall::StallClock;
use crate::{CommError, CommOptions, Communicator, WorldInfo, check_root};

/// Version of the wire protocol; peers of different versions refuse each other.
pub const PROTOCOL_VERSION: u32 = 1;
/// Values per data message (1 MiB of f32).
pub const BLOCK_FLOATS: usize = 1 << 18;
/// Blocks sent ahead of the one being received.
const DEPTH: usize = 4;
const HEADER: usize = 32;
const HELLO_LIMIT: i64 = 1 << 16;

const OP_ALLREDUCE: u32 = 1;
const OP_BROADCAST: u32 = 2;
const OP_BARRIER: u32 = 3;

/// One rank of a ZeroMQ group.
pub struct ZmqComm {
    world: WorldInfo,
    opts: CommOptions,
    push: Vec<Option<zmq::Socket>>,
    pull: Vec<Option<zmq::Socket>>,
    tag: u64,
    seq: u64,
    acc: Vec<f32>,
    recv: Vec<f32>,
    _ctx: zmq::Context,
}

fn zerr(context: impl Into<String>) -> impl FnOnce(zmq::Error) -> CommError {
    let context = context.into();
    move |e| CommError::Transport {
        backend: "zmq",
        context,
        detail: e.to_string(),
    }
}

/// What a message header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Call {
    seq: u64,
    op: u32,
    root: u32,
    len: u64,
}

impl Call {
    fn encode(&self, tag: u64) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0..8].copy_from_slice(&tag.to_le_bytes());
        h[8..16].copy_from_slice(&self.seq.to_le_bytes());
        h[16..20].copy_from_slice(&self.op.to_le_bytes());
        h[20..24].copy_from_slice(&self.root.to_le_bytes());
        h[24..32].copy_from_slice(&self.len.to_le_bytes());
        h
    }

    fn decode(h: &[u8; HEADER]) -> (u64, Call) {
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap_or_default());
        (
            u64_at(0),
            Call {
                seq: u64_at(8),
                op: u32_at(16),
                root: u32_at(20),
                len: u64_at(24),
            },
        )
    }

    fn describe(&self) -> String {
        let what = match self.op {
            OP_ALLREDUCE => format!("allreduce of {} values", self.len),
            OP_BROADCAST => format!("broadcast of {} bytes from root {}", self.len, self.root),
            OP_BARRIER => "barrier".into(),
            op => format!("unknown operation {op}"),
        };
        format!("{what} (operation #{})", self.seq)
    }
}

impl ZmqComm {
    /// Joins the group `world` through the rendezvous at `opts.master_addr:opts.master_port`.
    pub fn connect(world: WorldInfo, opts: &CommOptions) -> Result<Self, CommError> {
        let world = WorldInfo::new(world.rank, world.size)?;
        let ctx = zmq::Context::new();
        let (n, me) = (world.size, world.rank);
        let block_bytes = BLOCK_FLOATS * 4;
        let mut comm = ZmqComm {
            world,
            opts: opts.clone(),
            push: (0..n).map(|_| None).collect(),
            pull: (0..n).map(|_| None).collect(),
            tag: ffn_core::hash::fnv1a(opts.job_token.as_bytes()),
            seq: 0,
            acc: Vec::new(),
            recv: Vec::new(),
            _ctx: ctx.clone(),
        };
        if n == 1 {
            return Ok(comm);
        }
        let timeout_ms = opts.timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        let mut mine = Vec::new();
        for q in (0..n).filter(|&q| q != me) {
            let s = ctx
                .socket(zmq::PULL)
                .map_err(zerr("creating a PULL socket"))?;
            s.set_maxmsgsize(block_bytes as i64)
                .map_err(zerr("setting ZMQ_MAXMSGSIZE"))?;
            s.set_rcvhwm(4 * DEPTH as i32)
                .map_err(zerr("setting ZMQ_RCVHWM"))?;
            s.set_linger(0).map_err(zerr("setting ZMQ_LINGER"))?;
            let addr = format!("tcp://{}:*", opts.bind_addr);
            s.bind(&addr).map_err(zerr(format!(
                "rank {me}: binding a data socket to {addr} (FFN_COMM_BIND)"
            )))?;
            let ep = s
                .get_last_endpoint()
                .map_err(zerr("reading the bound endpoint"))?
                .map_err(|_| CommError::Transport {
                    backend: "zmq",
                    context: "bound endpoint".into(),
                    detail: "not UTF-8".into(),
                })?;
            mine.push((q, ep));
            comm.pull[q] = Some(s);
        }
        let hello = Hello {
            version: PROTOCOL_VERSION,
            token: opts.job_token.clone(),
            size: n,
            rank: me,
            block: block_bytes,
            endpoints: mine,
        };
        let table = if me == 0 {
            serve_rendezvous(&ctx, opts, hello)?
        } else {
            join_rendezvous(&ctx, opts, &hello)?
        };
        for q in (0..n).filter(|&q| q != me) {
            let ep = table
                .iter()
                .find(|(r, p, _)| *r == q && *p == me)
                .map(|(_, _, e)| e.clone())
                .ok_or_else(|| CommError::Protocol {
                    rank: me,
                    peer: 0,
                    detail: format!("the endpoint table has no entry for rank {q}"),
                })?;
            let s = ctx
                .socket(zmq::PUSH)
                .map_err(zerr("creating a PUSH socket"))?;
            s.set_sndhwm(4 * DEPTH as i32)
                .map_err(zerr("setting ZMQ_SNDHWM"))?;
            s.set_sndtimeo(timeout_ms)
                .map_err(zerr("setting ZMQ_SNDTIMEO"))?;
            s.set_linger(timeout_ms.min(5000))
                .map_err(zerr("setting ZMQ_LINGER"))?;
            s.connect(&ep)
                .map_err(zerr(format!("rank {me}: connecting to rank {q} at {ep}")))?;
            comm.push[q] = Some(s);
        }
        comm.barrier()?;
        Ok(comm)
    }

    fn call(&mut self, op: u32, root: usize, len: usize) -> Call {
        self.seq += 1;
        Call {
            seq: self.seq,
            op,
            root: root as u32,
            len: len as u64,
        }
    }

    fn send(&self, q: usize, call: &Call, payload: &[u8]) -> Result<(), CommError> {
        let me = self.world.rank;
        let s = self.push[q].as_ref().ok_or_else(|| missing_socket(me, q))?;
        let map = |e: zmq::Error| match e {
            zmq::Error::EAGAIN => CommError::Timeout {
                rank: me,
                peers: vec![q],
                op: op_name(call.op),
                waited: self.opts.timeout,
            },
            e => CommError::Transport {
                backend: "zmq",
                context: format!("rank {me}: sending to rank {q}"),
                detail: e.to_string(),
            },
        };
        s.send(&call.encode(self.tag)[..], zmq::SNDMORE)
            .map_err(map)?;
        s.send(payload, 0).map_err(map)
    }

    /// Receives one message from `q` into `dest`, which must be exactly the payload's size.
    fn recv(&self, q: usize, call: &Call, dest: &mut [u8]) -> Result<(), CommError> {
        let me = self.world.rank;
        let s = self.pull[q].as_ref().ok_or_else(|| missing_socket(me, q))?;
        let op = op_name(call.op);
        let mut clock = StallClock::new(me, op, &self.opts);
        loop {
            let wait = clock.until_next_check().as_millis().clamp(1, 1000) as i64;
            let ready = s
                .poll(zmq::POLLIN, wait)
                .map_err(zerr(format!("rank {me}: waiting for rank {q}")))?;
            if ready > 0 {
                break;
            }
            clock.check(|| vec![q])?;
        }
        let bad = |detail: String| CommError::Protocol {
            rank: me,
            peer: q,
            detail,
        };
        let mut h = [0u8; HEADER];
        let got = s
            .recv_into(&mut h, zmq::DONTWAIT)
            .map_err(zerr(format!("rank {me}: receiving from rank {q}")))?;
        let more = s.get_rcvmore().map_err(zerr("reading ZMQ_RCVMORE"))?;
        if got != HEADER || !more {
            return Err(bad(format!(
                "expected a {HEADER}-byte header frame, got {got} bytes"
            )));
        }
        let (tag, theirs) = Call::decode(&h);
        if tag != self.tag {
            return Err(bad("wrong job tag (a process of another job?)".into()));
        }
        if theirs != *call {
            return Err(CommError::LengthMismatch {
                rank: me,
                peer: q,
                op,
                expected: call.describe(),
                actual: theirs.describe(),
            });
        }
        let got = s
            .recv_into(dest, 0)
            .map_err(zerr(format!("rank {me}: receiving from rank {q}")))?;
        if got != dest.len() || s.get_rcvmore().map_err(zerr("reading ZMQ_RCVMORE"))? {
            return Err(bad(format!(
                "expected a payload of {} bytes, got {got}",
                dest.len()
            )));
        }
        Ok(())
    }
}

fn op_name(op: u32) -> &'static str {
    match op {
        OP_ALLREDUCE => "allreduce",
        OP_BROADCAST => "broadcast",
        _ => "barrier",
    }
}

fn missing_socket(rank: usize, peer: usize) -> CommError {
    CommError::Protocol {
        rank,
        peer,
        detail: "no socket for this peer".into(),
    }
}

/// Block `k` of chunk `c` (empty past the chunk's end).
fn block(c: &std::ops::Range<usize>, k: usize) -> std::ops::Range<usize> {
    let s = (c.start + k * BLOCK_FLOATS).min(c.end);
    let e = (s + BLOCK_FLOATS).min(c.end);
    s..e
}

impl Communicator for ZmqComm {
    fn rank(&self) -> usize {
        self.world.rank
    }

    fn size(&self) -> usize {
        self.world.size
    }

    fn backend(&self) -> &'static str {
        "zmq"
    }

    fn allreduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        let (n, me) = (self.world.size, self.world.rank);
        if n == 1 {
            return Ok(());
        }
        let call = self.call(OP_ALLREDUCE, 0, buf.len());
        let chunks: Vec<_> = (0..n).map(|q| chunk_range(buf.len(), n, q)).collect();
        let nblocks = buf.len().div_ceil(n).div_ceil(BLOCK_FLOATS).max(1);
        let mut acc = std::mem::take(&mut self.acc);
        let mut recv = std::mem::take(&mut self.recv);
        let result = (|| {
            // Reduce-scatter: send the pieces the others own, DEPTH blocks ahead; sum ours in rank order.
            let mut sent = 0;
            for k in 0..nblocks {
                while sent < nblocks && sent <= k + DEPTH {
                    for q in (0..n).filter(|&q| q != me) {
                        self.send(
                            q,
                            &call,
                            crate::reduce::as_bytes(&buf[block(&chunks[q], sent)]),
                        )?;
                    }
                    sent += 1;
                }
                let b = block(&chunks[me], k);
                acc.resize(b.len(), 0.0);
                recv.resize(b.len(), 0.0);
                for q in 0..n {
                    let part: &[f32] = if q == me {
                        &buf[b.clone()]
                    } else {
                        self.recv(q, &call, as_bytes_mut(&mut recv))?;
                        &recv
                    };
                    if q == 0 {
                        acc.copy_from_slice(part);
                    } else {
                        add_assign(&mut acc, part);
                    }
                }
                buf[b].copy_from_slice(&acc);
            }
            // Allgather: send our sums, receive the other owners' sums in place.
            let mut sent = 0;
            for k in 0..nblocks {
                while sent < nblocks && sent <= k + DEPTH {
                    let b = block(&chunks[me], sent);
                    for q in (0..n).filter(|&q| q != me) {
                        self.send(q, &call, crate::reduce::as_bytes(&buf[b.clone()]))?;
                    }
                    sent += 1;
                }
                for q in (0..n).filter(|&q| q != me) {
                    let b = block(&chunks[q], k);
                    self.recv(q, &call, as_bytes_mut(&mut buf[b]))?;
                }
            }
            Ok(())
        })();
        self.acc = acc;
        self.recv = recv;
        result
    }

    fn broadcast_bytes(&mut self, buf: &mut [u8], root: usize) -> Result<(), CommError> {
        check_root(root, self.world.size)?;
        let (n, me) = (self.world.size, self.world.rank);
        if n == 1 {
            return Ok(());
        }
        let call = self.call(OP_BROADCAST, root, buf.len());
        let block_bytes = BLOCK_FLOATS * 4;
        let nblocks = buf.len().div_ceil(block_bytes).max(1);
        for k in 0..nblocks {
            let s = (k * block_bytes).min(buf.len());
            let e = (s + block_bytes).min(buf.len());
            if me == root {
                for q in (0..n).filter(|&q| q != me) {
                    self.send(q, &call, &buf[s..e])?;
                }
            } else {
                self.recv(root, &call, &mut buf[s..e])?;
            }
        }
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        let (n, me) = (self.world.size, self.world.rank);
        if n == 1 {
            return Ok(());
        }
        let call = self.call(OP_BARRIER, 0, 0);
        for q in (0..n).filter(|&q| q != me) {
            self.send(q, &call, &[])?;
        }
        for q in (0..n).filter(|&q| q != me) {
            self.recv(q, &call, &mut [])?;
        }
        Ok(())
    }
}

/// A rank's registration at the rendezvous.
#[derive(Debug, Clone, PartialEq)]
struct Hello {
    version: u32,
    token: String,
    size: usize,
    rank: usize,
    block: usize,
    /// (peer, endpoint where this rank listens for that peer)
    endpoints: Vec<(usize, String)>,
}

impl Hello {
    fn encode(&self) -> String {
        let mut s = format!(
            "ffn-comm-zmq\nversion={}\ntoken={}\nsize={}\nrank={}\nblock={}\n",
            self.version,
            hex(self.token.as_bytes()),
            self.size,
            self.rank,
            self.block
        );
        for (q, ep) in &self.endpoints {
            s.push_str(&format!("ep={q} {ep}\n"));
        }
        s
    }

    fn decode(text: &str) -> Option<Hello> {
        let mut lines = text.lines();
        if lines.next()? != "ffn-comm-zmq" {
            return None;
        }
        let mut h = Hello {
            version: 0,
            token: String::new(),
            size: 0,
            rank: 0,
            block: 0,
            endpoints: Vec::new(),
        };
        for line in lines {
            let (k, v) = line.split_once('=')?;
            match k {
                "version" => h.version = v.parse().ok()?,
                "token" => h.token = String::from_utf8(unhex(v)?).ok()?,
                "size" => h.size = v.parse().ok()?,
                "rank" => h.rank = v.parse().ok()?,
                "block" => h.block = v.parse().ok()?,
                "ep" => {
                    let (q, ep) = v.split_once(' ')?;
                    h.endpoints.push((q.parse().ok()?, ep.to_string()));
                }
                _ => return None,
            }
        }
        Some(h)
    }

    /// Why rank 0 (`ours`) refuses `self`, as (field, expected, found).
    fn refusal(&self, ours: &Hello, taken: &[bool]) -> Option<(&'static str, String, String)> {
        if self.version != ours.version {
            return Some((
                "protocol version",
                ours.version.to_string(),
                self.version.to_string(),
            ));
        }
        if self.token != ours.token {
            return Some((
                "job token",
                "the job's FFN_COMM_TOKEN".into(),
                "a different token".into(),
            ));
        }
        if self.size != ours.size {
            return Some(("world size", ours.size.to_string(), self.size.to_string()));
        }
        if self.block != ours.block {
            return Some((
                "message size",
                ours.block.to_string(),
                self.block.to_string(),
            ));
        }
        if self.rank == 0 || self.rank >= ours.size || taken[self.rank] {
            return Some((
                "rank",
                format!("an unregistered rank in 1..{}", ours.size),
                self.rank.to_string(),
            ));
        }
        let mut peers: Vec<usize> = self.endpoints.iter().map(|(q, _)| *q).collect();
        peers.sort_unstable();
        let want: Vec<usize> = (0..ours.size).filter(|&q| q != self.rank).collect();
        if peers != want {
            return Some((
                "endpoint list",
                format!("one endpoint for each of {want:?}"),
                format!("{peers:?}"),
            ));
        }
        None
    }
}

/// Rank 0: accepts the other ranks and returns the endpoint table (rank, peer, endpoint).
fn serve_rendezvous(
    ctx: &zmq::Context,
    opts: &CommOptions,
    ours: Hello,
) -> Result<Vec<(usize, usize, String)>, CommError> {
    let router = ctx
        .socket(zmq::ROUTER)
        .map_err(zerr("creating the rendezvous socket"))?;
    router
        .set_maxmsgsize(HELLO_LIMIT)
        .map_err(zerr("setting ZMQ_MAXMSGSIZE"))?;
    router
        .set_linger(2000)
        .map_err(zerr("setting ZMQ_LINGER"))?;
    let addr = format!("tcp://{}:{}", opts.master_addr, opts.master_port);
    router.bind(&addr).map_err(zerr(format!(
        "rank 0: binding the rendezvous at {addr} (MASTER_ADDR, MASTER_PORT)"
    )))?;
    let n = ours.size;
    let mut taken = vec![false; n];
    let mut ids: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut table: Vec<(usize, usize, String)> = ours
        .endpoints
        .iter()
        .map(|(q, e)| (0, *q, e.clone()))
        .collect();
    let mut clock = StallClock::new(0, "connect", opts);
    while taken.iter().skip(1).any(|t| !t) {
        let wait = clock.until_next_check().as_millis().clamp(1, 1000) as i64;
        if router
            .poll(zmq::POLLIN, wait)
            .map_err(zerr("rank 0: waiting for hellos"))?
            == 0
        {
            clock.check(|| (1..n).filter(|&q| !taken[q]).collect())?;
            continue;
        }
        let parts = router
            .recv_multipart(0)
            .map_err(zerr("rank 0: receiving a hello"))?;
        let [id, body] = <[Vec<u8>; 2]>::try_from(parts).unwrap_or_default();
        let hello = std::str::from_utf8(&body).ok().and_then(Hello::decode);
        let reply = match &hello {
            None => Some((
                "hello",
                "an ffn-comm-zmq hello".to_string(),
                format!("{} unreadable bytes", body.len()),
            )),
            Some(h) => h.refusal(&ours, &taken),
        };
        match (reply, hello) {
            (Some((field, expected, actual)), h) => {
                crate::stall::warn(format!(
                    "ffn-comm: rank 0: refused a peer claiming rank {}: {field} mismatch: expected {expected}, found {actual}",
                    h.map(|h| h.rank.to_string()).unwrap_or_else(|| "?".into())
                ));
                let msg = format!("REFUSED\n{field}\n{expected}\n{actual}\n");
                router
                    .send_multipart([id.as_slice(), msg.as_bytes()], 0)
                    .map_err(zerr("rank 0: refusing a peer"))?;
            }
            (None, Some(h)) => {
                taken[h.rank] = true;
                ids[h.rank] = id;
                table.extend(h.endpoints.iter().map(|(q, e)| (h.rank, *q, e.clone())));
            }
            (None, None) => {}
        }
    }
    let mut msg = String::from("OK\n");
    for (r, q, e) in &table {
        msg.push_str(&format!("{r} {q} {e}\n"));
    }
    for id in ids.iter().skip(1) {
        router
            .send_multipart([id.as_slice(), msg.as_bytes()], 0)
            .map_err(zerr("rank 0: sending the endpoint table"))?;
    }
    Ok(table)
}

/// Ranks 1..: registers with rank 0 and returns the endpoint table.
fn join_rendezvous(
    ctx: &zmq::Context,
    opts: &CommOptions,
    hello: &Hello,
) -> Result<Vec<(usize, usize, String)>, CommError> {
    let me = hello.rank;
    let dealer = ctx
        .socket(zmq::DEALER)
        .map_err(zerr("creating the rendezvous socket"))?;
    dealer
        .set_maxmsgsize(HELLO_LIMIT)
        .map_err(zerr("setting ZMQ_MAXMSGSIZE"))?;
    dealer.set_linger(0).map_err(zerr("setting ZMQ_LINGER"))?;
    let addr = format!("tcp://{}:{}", opts.master_addr, opts.master_port);
    dealer.connect(&addr).map_err(zerr(format!(
        "rank {me}: connecting to rank 0 at {addr} (MASTER_ADDR, MASTER_PORT)"
    )))?;
    dealer
        .send(hello.encode().as_bytes(), 0)
        .map_err(zerr(format!("rank {me}: sending the hello to {addr}")))?;
    let mut clock = StallClock::new(me, "connect", opts);
    loop {
        let wait = clock.until_next_check().as_millis().clamp(1, 1000) as i64;
        if dealer
            .poll(zmq::POLLIN, wait)
            .map_err(zerr("waiting for rank 0"))?
            > 0
        {
            break;
        }
        clock.check(|| vec![0])?;
    }
    let body = dealer
        .recv_bytes(0)
        .map_err(zerr(format!("rank {me}: receiving the endpoint table")))?;
    let text = String::from_utf8_lossy(&body);
    let mut lines = text.lines();
    let bad = |detail: &str| CommError::Protocol {
        rank: me,
        peer: 0,
        detail: detail.to_string(),
    };
    match lines.next() {
        Some("OK") => {}
        Some("REFUSED") => {
            let mut f = || lines.next().unwrap_or("?").to_string();
            let field = match f().as_str() {
                "protocol version" => "protocol version",
                "job token" => "job token",
                "world size" => "world size",
                "message size" => "message size",
                "rank" => "rank",
                "endpoint list" => "endpoint list",
                _ => "hello",
            };
            let (expected, actual) = (f(), f());
            return Err(CommError::Refused {
                rank: me,
                field,
                expected,
                actual,
            });
        }
        _ => return Err(bad("unreadable reply to the hello")),
    }
    let mut table = Vec::new();
    for line in lines {
        let mut it = line.splitn(3, ' ');
        let (Some(r), Some(q), Some(e)) = (it.next(), it.next(), it.next()) else {
            return Err(bad("malformed endpoint table"));
        };
        let (Ok(r), Ok(q)) = (r.parse(), q.parse()) else {
            return Err(bad("malformed endpoint table"));
        };
        table.push((r, q, e.to_string()));
    }
    Ok(table)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;
    use std::time::Duration;

    fn opts(port: u16, token: &str) -> CommOptions {
        CommOptions {
            timeout: Duration::from_secs(2),
            master_port: port,
            job_token: token.into(),
            ..CommOptions::default()
        }
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn hello_round_trips() {
        let h = Hello {
            version: 1,
            token: "sécret".into(),
            size: 3,
            rank: 2,
            block: 4,
            endpoints: vec![
                (0, "tcp://127.0.0.1:1".into()),
                (1, "tcp://127.0.0.1:2".into()),
            ],
        };
        assert_eq!(Hello::decode(&h.encode()), Some(h.clone()));
        assert_eq!(
            h.refusal(
                &Hello {
                    rank: 0,
                    ..h.clone()
                },
                &[false; 3]
            ),
            None
        );
        let r = h
            .refusal(
                &Hello {
                    token: "x".into(),
                    ..h.clone()
                },
                &[false; 3],
            )
            .unwrap();
        assert_eq!(r.0, "job token");
        assert!(
            !r.1.contains("x") && !r.2.contains("sécret"),
            "tokens must not be printed"
        );
        assert_eq!(
            h.refusal(
                &Hello {
                    size: 4,
                    ..h.clone()
                },
                &[false; 4]
            )
            .unwrap()
            .0,
            "world size"
        );
        assert_eq!(
            h.refusal(
                &Hello {
                    version: 9,
                    ..h.clone()
                },
                &[false; 3]
            )
            .unwrap()
            .0,
            "protocol version"
        );
        assert_eq!(h.refusal(&h, &[false, false, true]).unwrap().0, "rank");
    }

    #[test]
    fn conformance_on_threads() {
        for n in [2usize, 3] {
            let o = opts(free_port(), "t");
            let digests: Vec<u64> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..n)
                    .map(|rank| {
                        let o = &o;
                        s.spawn(move || {
                            let mut c = ZmqComm::connect(WorldInfo { rank, size: n }, o)?;
                            conformance::run_all(&mut c, &conformance::SuiteOptions::quick())
                                .map(|r| r.digest)
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
            });
            let local = crate::local::LocalComm::run(n, |c| {
                conformance::run_all(c, &conformance::SuiteOptions::quick())
            })
            .unwrap();
            assert!(
                digests.iter().all(|d| *d == local[0].digest),
                "{n} ranks: {digests:x?}"
            );
        }
    }

    #[test]
    fn a_wrong_token_is_refused() {
        let port = free_port();
        std::thread::scope(|s| {
            let h = s.spawn(move || {
                ZmqComm::connect(WorldInfo { rank: 0, size: 2 }, &opts(port, "right"))
                    .err()
                    .unwrap()
            });
            let e = ZmqComm::connect(WorldInfo { rank: 1, size: 2 }, &opts(port, "wrong"))
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("rendezvous refused: job token mismatch"), "{e}");
            let e0 = h.join().unwrap().to_string();
            assert!(
                e0.contains("connect timed out") && e0.contains("rank(s) [1]"),
                "{e0}"
            );
        });
    }

    #[test]
    fn a_wrong_world_size_is_refused() {
        let port = free_port();
        std::thread::scope(|s| {
            let h = s.spawn(move || {
                ZmqComm::connect(WorldInfo { rank: 0, size: 2 }, &opts(port, "")).err()
            });
            let e = ZmqComm::connect(WorldInfo { rank: 1, size: 3 }, &opts(port, ""))
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
}
