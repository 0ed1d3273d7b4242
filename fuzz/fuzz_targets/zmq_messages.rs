//! Fuzzes every decoder of what a zmq peer sends (`ffn_comm::zmq_wire`): the hello, rank 0's
//! reply and the data header. The first byte picks the decoder (and the world size for replies);
//! the rest is the message. Properties: no decoder panics, and whatever decodes re-encodes to
//! bytes that decode to the same value (so nothing is accepted that the encoder would not write).
#![no_main]

use ffn_comm::zmq_wire::{Header, Hello, Reply};
use ffn_fuzz as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, msg)) = data.split_first() else {
        return;
    };
    match pick % 3 {
        0 => {
            if let Ok(h) = Hello::decode(msg) {
                assert_eq!(Hello::decode(&h.encode()).as_ref(), Ok(&h));
                assert!(h.rank < h.size && h.endpoints.len() < h.size);
            }
        }
        1 => {
            let size = usize::from(pick / 3) + 1;
            if let Ok(r) = Reply::decode(msg, size) {
                assert_eq!(Reply::decode(&r.encode(), size).as_ref(), Ok(&r));
            }
        }
        _ => {
            if let Ok(h) = Header::decode(msg) {
                assert_eq!(h.encode().as_slice(), msg);
            }
        }
    }
});
