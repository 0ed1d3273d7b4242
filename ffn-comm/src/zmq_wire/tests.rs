use super::*;

fn hello() -> Hello {
    Hello {
        version: PROTOCOL_VERSION,
        size: 3,
        rank: 2,
        block: 1 << 20,
        endpoints: vec![
            (0, "tcp://127.0.0.1:4001".into()),
            (1, "tcp://[::1]:4002".into()),
        ],
    }
}

fn with(h: &Hello, f: impl FnOnce(&mut Hello)) -> Hello {
    let mut h = h.clone();
    f(&mut h);
    h
}

#[test]
fn hello_round_trips_and_is_accepted_by_a_matching_rank_0() {
    let h = hello();
    assert_eq!(Hello::decode(&h.encode()), Ok(h.clone()));
    let ours = with(&h, |o| o.rank = 0);
    assert_eq!(h.refusal(&ours, &[true, false, false]), None);
}

#[test]
fn refusals_name_the_field() {
    let h = hello();
    let ours = with(&h, |o| o.rank = 0);
    let field = |theirs: Hello, taken: &[bool]| theirs.refusal(&ours, taken).map(|r| r.field);
    assert_eq!(
        field(with(&h, |x| x.size = 4), &[false; 3]),
        Some("world size")
    );
    assert_eq!(
        field(with(&h, |x| x.block = 7), &[false; 3]),
        Some("message size")
    );
    assert_eq!(field(h.clone(), &[false, false, true]), Some("rank"));
    assert_eq!(field(with(&h, |x| x.rank = 0), &[false; 3]), Some("rank"));
    assert_eq!(
        field(
            with(&h, |x| {
                x.endpoints.pop();
            }),
            &[false; 3]
        ),
        Some("endpoint list")
    );
    assert_eq!(
        field(with(&h, |x| x.version = 1), &[false; 3]),
        Some("protocol version")
    );
    // `taken` shorter than the claimed rank: refused, not an out-of-bounds read.
    assert_eq!(field(h.clone(), &[false]), Some("rank"));
}

#[test]
fn malformed_hellos_are_errors_naming_the_part() {
    let ok = String::from_utf8(hello().encode()).unwrap();
    let cases: Vec<(String, &str)> = vec![
        (ok.replace("ffn-comm-zmq", "ffn-comm-xyz"), "hello"),
        (ok.replace("version=2", "version=1"), "protocol version"),
        (
            ok.replace("version=2", "version=99999999999999999999999"),
            "protocol version",
        ),
        (ok.replace("size=3", "size=257"), "world size"),
        (ok.replace("size=3", "size=0"), "world size"),
        (ok.replace("size=3", "size=+3"), "world size"),
        (ok.replace("rank=2", "rank=3"), "rank"),
        (ok.replace("block=1048576\n", ""), "message size"),
        (ok.replace("ep=0", "ep=2"), "endpoint list"),
        (ok.replace("ep=1", "ep=0"), "endpoint list"),
        (ok.replace("ep=1", "ep=5"), "endpoint list"),
        (
            ok.replace("tcp://127.0.0.1:4001", "ipc:///tmp/x"),
            "endpoint list",
        ),
        (ok.replace("127.0.0.1:4001", "127.0.0.1:0"), "endpoint list"),
        (ok.replace("127.0.0.1", &"a".repeat(200)), "endpoint list"),
        (ok.replace("127.0.0.1", "evil host"), "endpoint list"),
        (format!("{ok}token=00\n"), "endpoint list"),
    ];
    for (text, what) in cases {
        let e = Hello::decode(text.as_bytes()).unwrap_err();
        assert_eq!(e.what, what, "{text:?}: {e}");
    }
    let e = Hello::decode(&[0xff; 10]).unwrap_err();
    assert!(e.to_string().contains("not UTF-8"), "{e}");
    let huge = vec![b'a'; hello_limit(MAX_RANKS) + 1];
    let e = Hello::decode(&huge).unwrap_err();
    assert!(e.to_string().starts_with("hello: expected at most"), "{e}");
}

#[test]
fn a_hello_of_the_largest_job_fits_its_limit() {
    let n = MAX_RANKS;
    let ep = format!("tcp://{}:65535", "h".repeat(MAX_ENDPOINT - 12));
    assert_eq!(ep.len(), MAX_ENDPOINT);
    let h = Hello {
        version: PROTOCOL_VERSION,
        size: n,
        rank: n - 1,
        block: usize::MAX,
        endpoints: (0..n - 1).map(|q| (q, ep.clone())).collect(),
    };
    let bytes = h.encode();
    assert!(
        bytes.len() <= hello_limit(n),
        "{} > {}",
        bytes.len(),
        hello_limit(n)
    );
    assert_eq!(Hello::decode(&bytes), Ok(h));
    let table = Reply::Table(
        (0..n)
            .flat_map(|r| (0..n).filter(move |q| *q != r).map(move |q| (r, q)))
            .map(|(rank, peer)| Route {
                rank,
                peer,
                endpoint: ep.clone(),
            })
            .collect(),
    );
    let bytes = table.encode();
    assert!(
        bytes.len() <= reply_limit(n),
        "{} > {}",
        bytes.len(),
        reply_limit(n)
    );
    assert_eq!(Reply::decode(&bytes, n), Ok(table));
}

#[test]
fn replies_round_trip_and_bad_tables_are_refused() {
    let t = Reply::Table(vec![
        Route {
            rank: 0,
            peer: 1,
            endpoint: "tcp://127.0.0.1:5".into(),
        },
        Route {
            rank: 1,
            peer: 0,
            endpoint: "tcp://127.0.0.1:6".into(),
        },
    ]);
    assert_eq!(Reply::decode(&t.encode(), 2), Ok(t));
    for (text, what) in [
        ("OK\n0 0 tcp://a:1\n", "endpoint table"),
        ("OK\n0 1 tcp://a:1\n0 1 tcp://a:2\n", "endpoint table"),
        ("OK\n0 2 tcp://a:1\n", "endpoint table"),
        ("OK\n0 1\n", "endpoint table"),
        ("OK\n0 1 tcp://a\n", "endpoint table"),
        ("HELLO\n", "reply"),
        ("REFUSED\nrank\n", "reply"),
    ] {
        let e = Reply::decode(text.as_bytes(), 2).unwrap_err();
        assert_eq!(e.what, what, "{text:?}: {e}");
    }
    let e = Reply::decode(&vec![b'x'; reply_limit(2) + 1], 2).unwrap_err();
    assert_eq!(e.what, "reply");
}

#[test]
fn refusals_round_trip_on_one_line_each_and_unknown_fields_read_as_hello() {
    let r = Refusal {
        field: "world size",
        expected: "2".into(),
        actual: "3\nOK\n0 1 tcp://x:1".into(),
    };
    let Ok(Reply::Refused(back)) = Reply::decode(&Reply::Refused(r).encode(), 2) else {
        panic!("not a refusal");
    };
    assert_eq!((back.field, back.expected.as_str()), ("world size", "2"));
    assert_eq!(back.actual, "3 OK 0 1 tcp://x:1");
    let Ok(Reply::Refused(back)) = Reply::decode(b"REFUSED\nsomething else\na\nb\n", 2) else {
        panic!("not a refusal");
    };
    assert_eq!(back.field, "hello");
}

#[test]
fn headers_round_trip_and_other_lengths_are_errors() {
    let h = Header {
        tag: *b"12345678",
        call: Call {
            seq: u64::MAX,
            op: OP_BROADCAST,
            root: 7,
            len: 1 << 40,
        },
    };
    assert_eq!(Header::decode(&h.encode()), Ok(h));
    for n in [0, 31, 33] {
        let e = Header::decode(&vec![0; n]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("header: expected 32 bytes, found {n} bytes")
        );
    }
    assert!(
        h.call
            .describe()
            .contains("broadcast of 1099511627776 bytes from root 7")
    );
}
