//! The wire format of the `zmq` backend: the rendezvous hello, rank 0's reply and the header of
//! every data message, as pure functions from bytes to a `Result`.
//!
//! Nothing here touches libzmq, so the decoders build without the `zmq` feature and are fuzzed by
//! `fuzz/fuzz_targets/zmq_messages.rs`. Every decoder bounds what it reads before it allocates:
//! a message longer than its limit, more fields than the world size allows, or an endpoint longer
//! than [`MAX_ENDPOINT`] bytes is an error, never an allocation the peer chose.
//!
//! # Hello (rank `r` to rank 0)
//! ```text
//! ffn-comm-zmq
//! version=2
//! size=3
//! rank=2
//! block=1048576
//! ep=0 tcp://127.0.0.1:41234      (one line per peer: where rank r listens for that peer)
//! ep=1 tcp://127.0.0.1:41235
//! ```
//! The job secret is not in the hello: the connection itself proves it (CURVE, see
//! `zmq_backend`).
//!
//! # Reply (rank 0 to rank `r`)
//! `OK` and one line `rank peer endpoint` per data socket of the job, or `REFUSED` and three
//! lines: the field, what rank 0 expected, what it found.
//!
//! # Data header
//! 32 bytes, little-endian: job tag (8), operation number (8), operation (4), root (4), length (8).

use std::fmt::Write as _;

/// Version of the wire protocol; peers of different versions refuse each other.
pub const PROTOCOL_VERSION: u32 = 2;
/// Largest world size of the zmq backend (every rank holds two sockets per peer).
pub const MAX_RANKS: usize = 256;
/// Longest endpoint (`tcp://host:port`) a peer may announce, in bytes.
pub const MAX_ENDPOINT: usize = 128;
/// Longest text field of a refusal, in bytes.
pub const MAX_TEXT: usize = 256;
/// Bytes of a data message header.
pub const HEADER: usize = 32;

/// Operation code of an allreduce.
pub const OP_ALLREDUCE: u32 = 1;
/// Operation code of a broadcast.
pub const OP_BROADCAST: u32 = 2;
/// Operation code of a barrier.
pub const OP_BARRIER: u32 = 3;

const MAGIC: &str = "ffn-comm-zmq";

/// The fields a refusal may name; anything else reads as `"hello"`.
const FIELDS: [&str; 7] = [
    "hello",
    "protocol version",
    "job token",
    "world size",
    "rank",
    "message size",
    "endpoint list",
];

/// A message that does not follow the protocol: which part, what was expected, what was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: expected {expected}, found {found}")]
pub struct WireError {
    /// The part of the message (`"hello"`, `"world size"`, `"endpoint table"`, `"header"`, ...).
    pub what: &'static str,
    /// What the protocol requires there.
    pub expected: String,
    /// What the message holds (never a secret).
    pub found: String,
}

fn wire_err(
    what: &'static str,
    expected: impl Into<String>,
    found: impl Into<String>,
) -> WireError {
    WireError {
        what,
        expected: expected.into(),
        found: found.into(),
    }
}

/// Longest hello a rank of a job of `size` ranks can send, in bytes.
pub fn hello_limit(size: usize) -> usize {
    128 + size.min(MAX_RANKS) * (MAX_ENDPOINT + 16)
}

/// Longest reply rank 0 can send to a job of `size` ranks, in bytes.
pub fn reply_limit(size: usize) -> usize {
    let n = size.min(MAX_RANKS);
    (128 + 3 * (MAX_TEXT + 1)).max(16 + n * n.saturating_sub(1) * (MAX_ENDPOINT + 16))
}

/// A rank's registration at the rendezvous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub version: u32,
    /// World size, `1..=MAX_RANKS`.
    pub size: usize,
    /// The sender's rank, `0..size`.
    pub rank: usize,
    /// Largest data message in bytes.
    pub block: usize,
    /// (peer, endpoint where the sender listens for that peer).
    pub endpoints: Vec<(usize, String)>,
}

/// Why rank 0 refused a hello: the field, what it expected, what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// One of the fields a refusal may name (`"world size"`, `"rank"`, ...).
    pub field: &'static str,
    /// What rank 0 requires.
    pub expected: String,
    /// What the hello held.
    pub actual: String,
}

impl From<WireError> for Refusal {
    fn from(e: WireError) -> Self {
        Refusal {
            field: known_field(e.what),
            expected: e.expected,
            actual: e.found,
        }
    }
}

fn known_field(s: &str) -> &'static str {
    FIELDS.into_iter().find(|f| *f == s).unwrap_or("hello")
}

/// Checks an announced endpoint: `tcp://host:port`, at most [`MAX_ENDPOINT`] bytes, only
/// characters of host names and IP addresses.
pub fn check_endpoint(ep: &str) -> Result<(), WireError> {
    let expected = || format!("tcp://HOST:PORT of at most {MAX_ENDPOINT} bytes");
    let found = || format!("{:?}", truncate(ep, 64));
    let ok = ep.len() <= MAX_ENDPOINT
        && ep.strip_prefix("tcp://").is_some_and(|rest| {
            rest.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty()
                    && host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || ".-_:[]".contains(c))
                    && port.parse::<u16>().is_ok_and(|p| p != 0)
            })
        });
    if ok {
        Ok(())
    } else {
        Err(wire_err("endpoint list", expected(), found()))
    }
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Parses a decimal `usize` field of at most 20 digits.
fn number(what: &'static str, v: &str, max: usize) -> Result<usize, WireError> {
    let n = (v.len() <= 20 && !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .then(|| v.parse::<usize>().ok())
        .flatten()
        .filter(|n| *n <= max);
    n.ok_or_else(|| {
        wire_err(
            what,
            format!("a number in 0..={max}"),
            format!("{:?}", truncate(v, 24)),
        )
    })
}

fn text<'a>(bytes: &'a [u8], what: &'static str, limit: usize) -> Result<&'a str, WireError> {
    if bytes.len() > limit {
        return Err(wire_err(
            what,
            format!("at most {limit} bytes"),
            format!("{} bytes", bytes.len()),
        ));
    }
    std::str::from_utf8(bytes).map_err(|_| {
        wire_err(
            what,
            "UTF-8 text",
            format!("{} bytes that are not UTF-8", bytes.len()),
        )
    })
}

/// Reads the line `key=value`, or fails naming the key.
fn field<'a>(
    lines: &mut std::str::Lines<'a>,
    key: &str,
    what: &'static str,
) -> Result<&'a str, WireError> {
    let line = lines.next().unwrap_or("");
    line.strip_prefix(key)
        .and_then(|r| r.strip_prefix('='))
        .ok_or_else(|| {
            wire_err(
                what,
                format!("a line {key}=..."),
                format!("{:?}", truncate(line, 32)),
            )
        })
}

impl Hello {
    /// The hello as sent on the wire.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!(
            "{MAGIC}\nversion={}\nsize={}\nrank={}\nblock={}\n",
            self.version, self.size, self.rank, self.block
        );
        for (q, ep) in &self.endpoints {
            let _ = writeln!(s, "ep={q} {ep}");
        }
        s.into_bytes()
    }

    /// Reads a hello. Checks its form and its internal consistency (rank below size, one endpoint
    /// per other rank at most, well-formed endpoints); [`refusal`](Self::refusal) then compares it
    /// with the job.
    pub fn decode(bytes: &[u8]) -> Result<Hello, WireError> {
        let text = text(bytes, "hello", hello_limit(MAX_RANKS))?;
        let mut lines = text.lines();
        let first = lines.next().unwrap_or("");
        if first != MAGIC {
            return Err(wire_err(
                "hello",
                format!("a first line {MAGIC:?}"),
                format!("{:?}", truncate(first, 32)),
            ));
        }
        let version = field(&mut lines, "version", "protocol version")?;
        let version = number("protocol version", version, u32::MAX as usize)? as u32;
        if version != PROTOCOL_VERSION {
            return Err(wire_err(
                "protocol version",
                PROTOCOL_VERSION.to_string(),
                version.to_string(),
            ));
        }
        let size = number(
            "world size",
            field(&mut lines, "size", "world size")?,
            MAX_RANKS,
        )?;
        if size == 0 {
            return Err(wire_err("world size", format!("1..={MAX_RANKS}"), "0"));
        }
        let rank = number("rank", field(&mut lines, "rank", "rank")?, size - 1)?;
        let block = number(
            "message size",
            field(&mut lines, "block", "message size")?,
            usize::MAX,
        )?;
        let mut endpoints = Vec::new();
        let mut seen = vec![false; size];
        for line in lines {
            let bad = || {
                wire_err(
                    "endpoint list",
                    "lines ep=PEER tcp://HOST:PORT",
                    format!("{:?}", truncate(line, 32)),
                )
            };
            let (q, ep) = line
                .strip_prefix("ep=")
                .and_then(|r| r.split_once(' '))
                .ok_or_else(bad)?;
            let q = number("endpoint list", q, size - 1)?;
            if q == rank || seen[q] {
                return Err(wire_err(
                    "endpoint list",
                    "one endpoint per other rank",
                    format!("a second or self endpoint for rank {q}"),
                ));
            }
            check_endpoint(ep)?;
            seen[q] = true;
            endpoints.push((q, ep.to_string()));
        }
        Ok(Hello {
            version,
            size,
            rank,
            block,
            endpoints,
        })
    }

    /// Why rank 0 (`ours`) refuses `self`, given the ranks already `taken`; `None` to accept.
    pub fn refusal(&self, ours: &Hello, taken: &[bool]) -> Option<Refusal> {
        let refuse = |field, expected: String, actual: String| {
            Some(Refusal {
                field,
                expected,
                actual,
            })
        };
        if self.version != ours.version {
            return refuse(
                "protocol version",
                ours.version.to_string(),
                self.version.to_string(),
            );
        }
        if self.size != ours.size {
            return refuse("world size", ours.size.to_string(), self.size.to_string());
        }
        if self.block != ours.block {
            return refuse(
                "message size",
                ours.block.to_string(),
                self.block.to_string(),
            );
        }
        if self.rank == 0 || self.rank >= ours.size || taken.get(self.rank).copied().unwrap_or(true)
        {
            return refuse(
                "rank",
                format!("an unregistered rank in 1..{}", ours.size),
                self.rank.to_string(),
            );
        }
        let mut peers: Vec<usize> = self.endpoints.iter().map(|(q, _)| *q).collect();
        peers.sort_unstable();
        let want: Vec<usize> = (0..ours.size).filter(|&q| q != self.rank).collect();
        if peers != want {
            return refuse(
                "endpoint list",
                format!("one endpoint for each of the {} other ranks", want.len()),
                format!("endpoints for {} ranks", peers.len()),
            );
        }
        None
    }
}

/// One data socket of the job: `rank` listens at `endpoint` for messages from `peer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The listening rank.
    pub rank: usize,
    /// The rank that connects there.
    pub peer: usize,
    /// `tcp://host:port`.
    pub endpoint: String,
}

/// Rank 0's answer to a hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Accepted: every data socket of the job.
    Table(Vec<Route>),
    /// Refused, and why.
    Refused(Refusal),
}

impl Reply {
    /// The reply as sent on the wire; refusal texts are cut to [`MAX_TEXT`] bytes, one line each.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = String::new();
        match self {
            Reply::Table(routes) => {
                s.push_str("OK\n");
                for r in routes {
                    let _ = writeln!(s, "{} {} {}", r.rank, r.peer, r.endpoint);
                }
            }
            Reply::Refused(r) => {
                let one_line =
                    |t: &str| truncate(t, MAX_TEXT).replace(|c: char| c.is_control(), " ");
                let _ = write!(
                    s,
                    "REFUSED\n{}\n{}\n{}\n",
                    r.field,
                    one_line(&r.expected),
                    one_line(&r.actual)
                );
            }
        }
        s.into_bytes()
    }

    /// Reads rank 0's reply to a rank of a job of `size` ranks: a table of at most
    /// `size * (size - 1)` distinct routes between ranks below `size`, or a refusal.
    pub fn decode(bytes: &[u8], size: usize) -> Result<Reply, WireError> {
        let size = size.min(MAX_RANKS);
        let text = text(bytes, "reply", reply_limit(size))?;
        let mut lines = text.lines();
        match lines.next() {
            Some("OK") => {}
            Some("REFUSED") => {
                let mut next = || -> Result<String, WireError> {
                    let l = lines
                        .next()
                        .ok_or_else(|| wire_err("reply", "three lines after REFUSED", "fewer"))?;
                    if l.len() > MAX_TEXT || l.chars().any(char::is_control) {
                        return Err(wire_err(
                            "reply",
                            format!("lines of at most {MAX_TEXT} bytes without control characters"),
                            format!("{} bytes", l.len()),
                        ));
                    }
                    Ok(l.to_string())
                };
                let field = known_field(&next()?);
                let (expected, actual) = (next()?, next()?);
                return Ok(Reply::Refused(Refusal {
                    field,
                    expected,
                    actual,
                }));
            }
            other => {
                return Err(wire_err(
                    "reply",
                    "OK or REFUSED",
                    format!("{:?}", truncate(other.unwrap_or(""), 32)),
                ));
            }
        }
        let mut seen = vec![false; size * size];
        let mut routes = Vec::new();
        for line in lines {
            let bad = || {
                wire_err(
                    "endpoint table",
                    "lines RANK PEER tcp://HOST:PORT",
                    format!("{:?}", truncate(line, 32)),
                )
            };
            let mut it = line.splitn(3, ' ');
            let (Some(r), Some(q), Some(ep)) = (it.next(), it.next(), it.next()) else {
                return Err(bad());
            };
            let (r, q) = (
                number("endpoint table", r, size.saturating_sub(1))?,
                number("endpoint table", q, size.saturating_sub(1))?,
            );
            if r == q || seen[r * size + q] {
                return Err(wire_err(
                    "endpoint table",
                    "one route per pair of distinct ranks",
                    format!("a second or self route {r} {q}"),
                ));
            }
            check_endpoint(ep).map_err(|e| WireError {
                what: "endpoint table",
                ..e
            })?;
            seen[r * size + q] = true;
            routes.push(Route {
                rank: r,
                peer: q,
                endpoint: ep.to_string(),
            });
        }
        Ok(Reply::Table(routes))
    }
}

/// What a data message header says about the collective it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// Operation number, counted from 1 on every rank.
    pub seq: u64,
    /// [`OP_ALLREDUCE`], [`OP_BROADCAST`] or [`OP_BARRIER`].
    pub op: u32,
    /// Broadcast root (0 otherwise).
    pub root: u32,
    /// Values (allreduce) or bytes (broadcast) of the whole call.
    pub len: u64,
}

impl Call {
    /// The call in words, for error messages.
    pub fn describe(&self) -> String {
        let what = match self.op {
            OP_ALLREDUCE => format!("allreduce of {} values", self.len),
            OP_BROADCAST => format!("broadcast of {} bytes from root {}", self.len, self.root),
            OP_BARRIER => "barrier".into(),
            op => format!("unknown operation {op}"),
        };
        format!("{what} (operation #{})", self.seq)
    }
}

/// The first frame of every data message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The job tag (derived from the job secret).
    pub tag: [u8; 8],
    /// The collective.
    pub call: Call,
}

impl Header {
    /// The header as sent on the wire.
    pub fn encode(&self) -> [u8; HEADER] {
        let c = &self.call;
        let mut h = [0u8; HEADER];
        h[0..8].copy_from_slice(&self.tag);
        h[8..16].copy_from_slice(&c.seq.to_le_bytes());
        h[16..20].copy_from_slice(&c.op.to_le_bytes());
        h[20..24].copy_from_slice(&c.root.to_le_bytes());
        h[24..32].copy_from_slice(&c.len.to_le_bytes());
        h
    }

    /// Reads a header: exactly [`HEADER`] bytes.
    pub fn decode(bytes: &[u8]) -> Result<Header, WireError> {
        let h: &[u8; HEADER] = bytes.try_into().map_err(|_| {
            wire_err(
                "header",
                format!("{HEADER} bytes"),
                format!("{} bytes", bytes.len()),
            )
        })?;
        let mut tag = [0u8; 8];
        tag.copy_from_slice(&h[0..8]);
        let u64_at = |i: usize| {
            u64::from_le_bytes([
                h[i],
                h[i + 1],
                h[i + 2],
                h[i + 3],
                h[i + 4],
                h[i + 5],
                h[i + 6],
                h[i + 7],
            ])
        };
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        Ok(Header {
            tag,
            call: Call {
                seq: u64_at(8),
                op: u32_at(16),
                root: u32_at(20),
                len: u64_at(24),
            },
        })
    }
}

#[cfg(test)]
mod tests;
