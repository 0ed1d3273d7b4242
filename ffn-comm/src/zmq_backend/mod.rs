//! The `zmq` backend (feature `zmq`): ranks are processes that talk TCP through libzmq.
//!
//! # Security
//! Every connection, rendezvous and data sockets alike, is a CURVE connection whose keys are
//! derived from the job secret `FFN_COMM_TOKEN` ([`curve`]): a peer that does not hold the secret
//! cannot complete a handshake, so none of its frames reaches the backend, and all traffic is
//! encrypted. A multi-rank job without a secret (at least 16 characters) does not start; `ffn
//! launch` always makes one. Nothing binds a wildcard address unless asked to explicitly
//! (`FFN_COMM_MASTER_BIND`). Every length a peer sends is bounded before anything is allocated
//! ([`crate::zmq_wire`]).
//!
//! # Rendezvous
//! Rank 0 binds a ROUTER socket at `MASTER_ADDR:MASTER_PORT`. Every rank binds one PULL socket per
//! peer on `FFN_COMM_BIND` (loopback by default, an ephemeral port each). Ranks 1.. connect a DEALER
//! to rank 0 and present a hello: protocol version, world size, rank, message size and their
//! endpoints. Rank 0 refuses a hello with a wrong world size, protocol version, message size or a
//! rank already taken (the peer gets [`CommError::Refused`] saying what did not match), and once
//! every rank has registered it sends everybody the endpoint table. Every rank then connects one
//! PUSH socket per peer. A rank with a different secret gets [`CommError::Refused`] naming the job
//! token.
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

mod curve;
mod rendezvous;

use crate::reduce::{add_assign, as_bytes_mut, chunk_range};
use crate::secret::ct_eq;
use crate::stall::StallClock;
use crate::zmq_wire::{
    Call, HEADER, Header, Hello, MAX_RANKS, OP_ALLREDUCE, OP_BARRIER, OP_BROADCAST,
};
use crate::{CommError, CommOptions, Communicator, WorldInfo, check_root};
use curve::{Keys, Zap};

pub use crate::zmq_wire::PROTOCOL_VERSION;
/// Values per data message (1 MiB of f32).
pub const BLOCK_FLOATS: usize = 1 << 18;
/// Blocks sent ahead of the one being received.
const DEPTH: usize = 4;

/// One rank of a ZeroMQ group.
pub struct ZmqComm {
    world: WorldInfo,
    opts: CommOptions,
    push: Vec<Option<zmq::Socket>>,
    pull: Vec<Option<zmq::Socket>>,
    tag: [u8; 8],
    seq: u64,
    acc: Vec<f32>,
    recv: Vec<f32>,
    /// Where this rank listens for each peer (empty for a group of one).
    endpoints: Vec<(usize, String)>,
    // Dropped after the sockets (fields drop in order), before the context.
    _zap: Option<Zap>,
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

impl ZmqComm {
    /// Joins the group `world` through the rendezvous at `opts.master_addr:opts.master_port`,
    /// proving the job secret `opts.job_token` on every connection.
    pub fn connect(world: WorldInfo, opts: &CommOptions) -> Result<Self, CommError> {
        let world = WorldInfo::new(world.rank, world.size)?;
        let (n, me) = (world.size, world.rank);
        if n > MAX_RANKS {
            return Err(CommError::Config {
                field: "world size",
                expected: format!("at most {MAX_RANKS} for the zmq backend"),
                actual: n.to_string(),
            });
        }
        let ctx = zmq::Context::new();
        let block_bytes = BLOCK_FLOATS * 4;
        let mut comm = ZmqComm {
            world,
            opts: opts.clone(),
            push: (0..n).map(|_| None).collect(),
            pull: (0..n).map(|_| None).collect(),
            tag: [0; 8],
            seq: 0,
            acc: Vec::new(),
            recv: Vec::new(),
            endpoints: Vec::new(),
            _zap: None,
            _ctx: ctx.clone(),
        };
        if n == 1 {
            return Ok(comm);
        }
        let keys = Keys::derive(&opts.job_token)?;
        comm.tag = keys.tag;
        comm._zap = Some(Zap::start(&ctx, &keys, me)?);
        if crate::env::is_wildcard(&opts.bind_addr) {
            return Err(crate::env::wildcard_bind(&opts.bind_addr));
        }
        let timeout_ms = opts.timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        for q in (0..n).filter(|&q| q != me) {
            let s = ctx
                .socket(zmq::PULL)
                .map_err(zerr("creating a PULL socket"))?;
            keys.server(&s)?;
            // The limit applies to the frame on the wire, which CURVE makes larger than the
            // payload (box overhead and command header): a full block must still fit.
            s.set_maxmsgsize((block_bytes + CURVE_FRAME_OVERHEAD) as i64)
                .map_err(zerr("setting ZMQ_MAXMSGSIZE"))?;
            s.set_rcvhwm(4 * DEPTH as i32)
                .map_err(zerr("setting ZMQ_RCVHWM"))?;
            s.set_linger(0).map_err(zerr("setting ZMQ_LINGER"))?;
            let (addr, v6) = rendezvous::tcp_endpoint(&opts.bind_addr, "*");
            s.set_ipv6(v6).map_err(zerr("setting ZMQ_IPV6"))?;
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
            crate::zmq_wire::check_endpoint(&ep).map_err(|e| CommError::Config {
                field: "FFN_COMM_BIND",
                expected: e.expected,
                actual: e.found,
            })?;
            comm.endpoints.push((q, ep));
            comm.pull[q] = Some(s);
        }
        let hello = Hello {
            version: PROTOCOL_VERSION,
            size: n,
            rank: me,
            block: block_bytes,
            endpoints: comm.endpoints.clone(),
        };
        let table = if me == 0 {
            rendezvous::serve(&ctx, opts, &keys, hello)?
        } else {
            rendezvous::join(&ctx, opts, &keys, &hello)?
        };
        for q in (0..n).filter(|&q| q != me) {
            let ep = table
                .iter()
                .find(|r| r.rank == q && r.peer == me)
                .map(|r| r.endpoint.clone())
                .ok_or_else(|| CommError::Protocol {
                    rank: me,
                    peer: 0,
                    detail: format!("the endpoint table has no entry for rank {q}"),
                })?;
            let s = ctx
                .socket(zmq::PUSH)
                .map_err(zerr("creating a PUSH socket"))?;
            keys.client(&s)?;
            s.set_sndhwm(4 * DEPTH as i32)
                .map_err(zerr("setting ZMQ_SNDHWM"))?;
            s.set_sndtimeo(timeout_ms)
                .map_err(zerr("setting ZMQ_SNDTIMEO"))?;
            s.set_linger(timeout_ms.min(5000))
                .map_err(zerr("setting ZMQ_LINGER"))?;
            s.set_ipv6(ep.starts_with("tcp://["))
                .map_err(zerr("setting ZMQ_IPV6"))?;
            s.connect(&ep)
                .map_err(zerr(format!("rank {me}: connecting to rank {q} at {ep}")))?;
            comm.push[q] = Some(s);
        }
        comm.barrier()?;
        Ok(comm)
    }

    /// Where this rank's data sockets listen, as (peer, endpoint); empty for a group of one.
    pub fn endpoints(&self) -> &[(usize, String)] {
        &self.endpoints
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
        let header = Header {
            tag: self.tag,
            call: *call,
        };
        s.send(&header.encode()[..], zmq::SNDMORE).map_err(map)?;
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
        let theirs = Header::decode(&h).map_err(|e| bad(e.to_string()))?;
        if !ct_eq(&theirs.tag, &self.tag) {
            return Err(bad("wrong job tag (a process of another job?)".into()));
        }
        let theirs = theirs.call;
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

/// Bytes that CURVE adds to a frame on the wire (a MESSAGE command: name, flags, nonce and the
/// box's authenticator are well under this).
const CURVE_FRAME_OVERHEAD: usize = 256;

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

#[cfg(test)]
mod tests;
