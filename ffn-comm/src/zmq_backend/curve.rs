//! CURVE security of the zmq backend: keys derived from the job secret, the server and client
//! roles of sockets, the ZAP handler that admits only the job's client key, and socket monitors
//! that tell when a handshake was refused.
//!
//! Every socket that binds (rank 0's rendezvous, every rank's data sockets) is a CURVE server
//! with the job's server key pair; every socket that connects is a CURVE client with the job's
//! client key pair and the server's public key. All four keys are derived from the job secret
//! ([`crate::secret::derive`]), so a peer without it can neither complete the handshake (it does
//! not know the server's public key) nor pass the ZAP check (it does not hold the client key): no
//! frame of a stranger ever reaches the backend. Traffic is encrypted and authenticated
//! (CurveZMQ: Curve25519, XSalsa20-Poly1305, fresh short-term keys per connection).

use super::zerr;
use crate::CommError;
use crate::secret::{check_token, ct_eq, derive};
use std::ffi::{CStr, CString, c_char, c_int};
use std::thread::JoinHandle;

/// Where libzmq looks for the ZAP handler of a context (RFC 27).
const ZAP_ENDPOINT: &str = "inproc://zeromq.zap.01";
const ZAP_STOP: &str = "inproc://ffn-comm-zap-stop";
/// The ZAP domain of every server socket of the backend.
const ZAP_DOMAIN: &str = "ffn-comm";

unsafe extern "C" {
    /// libzmq (>= 4.2): the Z85 public key of a Z85 secret key; -1 without CURVE support.
    fn zmq_curve_public(z85_public_key: *mut c_char, z85_secret_key: *const c_char) -> c_int;
}

/// The job's keys, derived from its secret.
pub(crate) struct Keys {
    server_public: [u8; 32],
    server_secret: [u8; 32],
    client_public: [u8; 32],
    client_secret: [u8; 32],
    /// The tag every data header carries.
    pub(crate) tag: [u8; 8],
}

impl Keys {
    /// Derives the job's keys from `token`; fails when the token is too short or libzmq was built
    /// without CURVE.
    pub(crate) fn derive(token: &str) -> Result<Keys, CommError> {
        check_token(token)?;
        if zmq::has("curve") != Some(true) {
            return Err(CommError::Transport {
                backend: "zmq",
                context: "checking for CURVE security".into(),
                detail: "this libzmq was built without CURVE (libsodium); install one with it \
                         (Debian's libzmq5 has it)"
                    .into(),
            });
        }
        let server_secret = derive(token, "zmq/curve-server-secret");
        let client_secret = derive(token, "zmq/curve-client-secret");
        let mut tag = [0u8; 8];
        tag.copy_from_slice(&derive(token, "zmq/job-tag")[..8]);
        Ok(Keys {
            server_public: curve_public(&server_secret)?,
            server_secret,
            client_public: curve_public(&client_secret)?,
            client_secret,
            tag,
        })
    }

    /// The public key of the job's CURVE servers (for tests that play a stranger who knows it).
    #[cfg(test)]
    pub(crate) fn server_public(&self) -> [u8; 32] {
        self.server_public
    }

    /// Makes `s` a CURVE server of the job (before it binds).
    pub(crate) fn server(&self, s: &zmq::Socket) -> Result<(), CommError> {
        s.set_curve_server(true)
            .map_err(zerr("setting ZMQ_CURVE_SERVER"))?;
        s.set_curve_secretkey(&self.server_secret)
            .map_err(zerr("setting ZMQ_CURVE_SECRETKEY"))?;
        s.set_zap_domain(ZAP_DOMAIN)
            .map_err(zerr("setting ZMQ_ZAP_DOMAIN"))
    }

    /// Makes `s` a CURVE client of the job (before it connects).
    pub(crate) fn client(&self, s: &zmq::Socket) -> Result<(), CommError> {
        s.set_curve_serverkey(&self.server_public)
            .map_err(zerr("setting ZMQ_CURVE_SERVERKEY"))?;
        s.set_curve_publickey(&self.client_public)
            .map_err(zerr("setting ZMQ_CURVE_PUBLICKEY"))?;
        s.set_curve_secretkey(&self.client_secret)
            .map_err(zerr("setting ZMQ_CURVE_SECRETKEY"))
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        for b in self.server_secret.iter_mut().chain(&mut self.client_secret) {
            // SAFETY: a valid, aligned byte of our own array; volatile so the wipe is not elided.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

/// The Curve25519 public key of `secret`, computed by libzmq.
fn curve_public(secret: &[u8; 32]) -> Result<[u8; 32], CommError> {
    let fail = |detail: String| CommError::Transport {
        backend: "zmq",
        context: "deriving a CURVE public key (zmq_curve_public)".into(),
        detail,
    };
    let z85 = zmq::z85_encode(secret).map_err(|e| fail(e.to_string()))?;
    let z85 = CString::new(z85).map_err(|e| fail(e.to_string()))?;
    let mut out = [0 as c_char; 41];
    // SAFETY: `out` has room for the 40 Z85 characters and the NUL; the input is NUL-terminated.
    let rc = unsafe { zmq_curve_public(out.as_mut_ptr(), z85.as_ptr()) };
    if rc != 0 {
        return Err(fail(std::io::Error::last_os_error().to_string()));
    }
    // SAFETY: libzmq wrote a NUL-terminated string into `out`.
    let public = unsafe { CStr::from_ptr(out.as_ptr()) }
        .to_str()
        .map_err(|e| fail(e.to_string()))?;
    let bytes = zmq::z85_decode(public).map_err(|e| fail(e.to_string()))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| fail(format!("expected 32 bytes, got {}", b.len())))
}

/// The ZAP handler of one context: a thread that answers libzmq's authentication requests,
/// accepting only CURVE clients that present the job's client key. Stopped on drop.
pub(crate) struct Zap {
    stop: zmq::Socket,
    thread: Option<JoinHandle<()>>,
}

impl Zap {
    /// Binds the handler in `ctx` (before any server socket of `ctx` accepts a connection).
    pub(crate) fn start(ctx: &zmq::Context, keys: &Keys, rank: usize) -> Result<Zap, CommError> {
        let rep = ctx
            .socket(zmq::REP)
            .map_err(zerr("creating the ZAP socket"))?;
        rep.set_linger(0).map_err(zerr("setting ZMQ_LINGER"))?;
        rep.bind(ZAP_ENDPOINT)
            .map_err(zerr(format!("binding the ZAP handler at {ZAP_ENDPOINT}")))?;
        let stop_rx = ctx
            .socket(zmq::PAIR)
            .map_err(zerr("creating a PAIR socket"))?;
        stop_rx
            .bind(ZAP_STOP)
            .map_err(zerr(format!("binding {ZAP_STOP}")))?;
        let stop = ctx
            .socket(zmq::PAIR)
            .map_err(zerr("creating a PAIR socket"))?;
        stop.connect(ZAP_STOP)
            .map_err(zerr(format!("connecting to {ZAP_STOP}")))?;
        let key = keys.client_public;
        let thread = std::thread::Builder::new()
            .name(format!("ffn-comm-zap-{rank}"))
            .spawn(move || serve_zap(rep, stop_rx, key, rank))
            .map_err(|e| CommError::io("starting the ZAP handler thread", e))?;
        Ok(Zap {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Zap {
    fn drop(&mut self) {
        let _ = self.stop.send(&b"stop"[..], 0);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_zap(rep: zmq::Socket, stop: zmq::Socket, key: [u8; 32], rank: usize) {
    loop {
        let mut items = [
            rep.as_poll_item(zmq::POLLIN),
            stop.as_poll_item(zmq::POLLIN),
        ];
        if zmq::poll(&mut items, -1).is_err() || items[1].is_readable() {
            return;
        }
        if !items[0].is_readable() {
            continue;
        }
        // The request comes from libzmq itself (in-process), not from the peer.
        let Ok(request) = rep.recv_multipart(0) else {
            return;
        };
        let (reply, refused) = zap_reply(&request, &key);
        if let Some(address) = refused {
            crate::stall::warn(format!(
                "ffn-comm: rank {rank}: refused a connection from {address}: it does not hold \
                 the job secret (its CURVE client key is not the job's)"
            ));
        }
        if rep.send_multipart(reply, 0).is_err() {
            return;
        }
    }
}

/// The ZAP reply to `request` (RFC 27 frames: version, id, domain, address, identity, mechanism,
/// credentials), and the peer's address when it is refused.
fn zap_reply(request: &[Vec<u8>], key: &[u8; 32]) -> (Vec<Vec<u8>>, Option<String>) {
    let frame = |i: usize| request.get(i).map(Vec::as_slice).unwrap_or(&[]);
    let ok =
        request.len() == 7 && frame(0) == b"1.0" && frame(5) == b"CURVE" && ct_eq(frame(6), key);
    let (code, text): (&[u8], &[u8]) = if ok {
        (b"200", b"OK")
    } else {
        (b"400", b"not a rank of this job")
    };
    let reply = vec![
        b"1.0".to_vec(),
        frame(1).to_vec(),
        code.to_vec(),
        text.to_vec(),
        if ok {
            b"ffn-comm-rank".to_vec()
        } else {
            Vec::new()
        },
        Vec::new(),
    ];
    let address = (!ok).then(|| String::from_utf8_lossy(frame(3)).into_owned());
    (reply, address)
}

/// Events a handshake monitor reports.
const HANDSHAKE_EVENTS: [zmq::SocketEvent; 4] = [
    zmq::SocketEvent::HANDSHAKE_SUCCEEDED,
    zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL,
    zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL,
    zmq::SocketEvent::HANDSHAKE_FAILED_AUTH,
];

/// Handshake outcomes of one socket.
pub(crate) struct Monitor {
    events: zmq::Socket,
    /// Handshakes that succeeded so far.
    pub(crate) succeeded: usize,
    /// Handshakes that failed so far.
    pub(crate) failed: usize,
}

impl Monitor {
    /// Watches the handshakes of `s` (named `name`, unique within `ctx`).
    pub(crate) fn new(ctx: &zmq::Context, s: &zmq::Socket, name: &str) -> Result<Self, CommError> {
        let ep = format!("inproc://ffn-comm-monitor-{name}");
        let mask = HANDSHAKE_EVENTS
            .iter()
            .fold(0, |m, e| m | i32::from(e.to_raw()));
        s.monitor(&ep, mask)
            .map_err(zerr(format!("monitoring a socket at {ep}")))?;
        let events = ctx
            .socket(zmq::PAIR)
            .map_err(zerr("creating a PAIR socket"))?;
        events
            .connect(&ep)
            .map_err(zerr(format!("connecting to {ep}")))?;
        Ok(Monitor {
            events,
            succeeded: 0,
            failed: 0,
        })
    }

    /// A poll item that becomes readable when an event arrives.
    pub(crate) fn poll_item(&self) -> zmq::PollItem<'_> {
        self.events.as_poll_item(zmq::POLLIN)
    }

    /// Counts the events that arrived; returns how many handshakes failed among them.
    pub(crate) fn drain(&mut self) -> usize {
        let mut new_failures = 0;
        // Each event is two frames: 6 bytes (u16 event, u32 value), then the endpoint.
        while let Ok(parts) = self.events.recv_multipart(zmq::DONTWAIT) {
            let Some(raw) = parts.first().and_then(|p| p.get(..2)) else {
                continue;
            };
            match zmq::SocketEvent::from_raw(u16::from_ne_bytes([raw[0], raw[1]])) {
                zmq::SocketEvent::HANDSHAKE_SUCCEEDED => self.succeeded += 1,
                _ => new_failures += 1,
            }
        }
        self.failed += new_failures;
        new_failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_keys_match_libzmq_key_pairs() {
        let pair = zmq::CurveKeyPair::new().unwrap();
        assert_eq!(curve_public(&pair.secret_key).unwrap(), pair.public_key);
    }

    #[test]
    fn keys_need_a_token_and_differ_between_tokens() {
        let e = Keys::derive("short").err().unwrap().to_string();
        assert!(e.contains("FFN_COMM_TOKEN"), "{e}");
        let a = Keys::derive("0123456789abcdef").unwrap();
        let b = Keys::derive("0123456789abcdeF").unwrap();
        assert_ne!(a.server_public, b.server_public);
        assert_ne!(a.client_public, a.server_public);
        assert_ne!(a.tag, b.tag);
    }

    #[test]
    fn zap_admits_only_the_job_key_over_curve() {
        let key = [7u8; 32];
        let req = |mech: &[u8], cred: &[u8]| -> Vec<Vec<u8>> {
            vec![
                b"1.0".to_vec(),
                b"id".to_vec(),
                b"ffn-comm".to_vec(),
                b"127.0.0.1".to_vec(),
                Vec::new(),
                mech.to_vec(),
                cred.to_vec(),
            ]
        };
        let (r, refused) = zap_reply(&req(b"CURVE", &key), &key);
        assert_eq!(
            (r[1].as_slice(), r[2].as_slice(), refused),
            (&b"id"[..], &b"200"[..], None)
        );
        let mut other = key;
        other[31] ^= 1;
        let (r, refused) = zap_reply(&req(b"CURVE", &other), &key);
        assert_eq!(r[2], b"400");
        assert_eq!(refused.as_deref(), Some("127.0.0.1"));
        assert_eq!(zap_reply(&req(b"NULL", &key), &key).0[2], b"400");
        assert_eq!(zap_reply(&req(b"CURVE", &key)[..6], &key).0[2], b"400");
    }
}
