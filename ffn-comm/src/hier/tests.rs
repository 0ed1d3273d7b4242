use super::*;
use crate::conformance::{self, SuiteOptions};
use std::time::Duration;

fn opts(port: u16) -> CommOptions {
    CommOptions {
        timeout: Duration::from_secs(10),
        master_port: port,
        job_token: "unit-test-secret-0123456789".into(),
        shm_name: Some(format!("ffn-test-hier-{}-{port}", std::process::id())),
        ..CommOptions::default()
    }
}

/// Runs `f` on `hosts x local_size` ranks, each a thread with its own [`HierComm`].
fn on_threads<T: Send>(
    hosts: usize,
    local_size: usize,
    f: impl Fn(&mut HierComm) -> T + Sync,
) -> Vec<T> {
    let n = hosts * local_size;
    let o = opts(crate::free_loopback_port());
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|rank| {
                let (o, f) = (&o, &f);
                s.spawn(move || {
                    let world = WorldInfo { rank, size: n };
                    let layout = HostLayout::new(world, local_size).unwrap();
                    f(&mut HierComm::connect(world, layout, o).unwrap())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn flat_digest(n: usize) -> u64 {
    crate::local::LocalComm::run(n, |c| conformance::run_all(c, &SuiteOptions::quick())).unwrap()[0]
        .digest
}

#[test]
fn conformance_on_threads_in_every_layout() {
    for (hosts, k) in [(2usize, 2usize), (1, 2), (2, 1), (3, 2)] {
        let digests = on_threads(hosts, k, |c| {
            assert_eq!(c.backend(), "hier");
            assert_eq!(c.summation(), Summation::HostThenRank { local_size: k });
            conformance::run_all(c, &SuiteOptions::quick())
                .unwrap()
                .digest
        });
        assert!(digests.iter().all(|d| *d == digests[0]), "{digests:x?}");
        // One host or one rank per host is the flat rank order, bit for bit; otherwise not.
        let flat = flat_digest(hosts * k);
        assert_eq!(digests[0] == flat, hosts == 1 || k == 1, "{hosts} x {k}");
    }
}

#[test]
fn a_layout_that_does_not_match_the_world_is_refused() {
    let world = WorldInfo { rank: 1, size: 4 };
    let wrong = HostLayout {
        host: 1,
        hosts: 2,
        local_rank: 1,
        local_size: 2,
    };
    let e = HierComm::connect(world, wrong, &opts(crate::free_loopback_port()))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("host layout") && e.contains("rank 1 of 4"),
        "{e}"
    );
}

#[test]
fn errors_name_world_ranks() {
    let l = HostLayout {
        host: 1,
        hosts: 3,
        local_rank: 1,
        local_size: 4,
    };
    let e = in_host(
        CommError::Timeout {
            rank: 1,
            peers: vec![0, 3],
            op: "allreduce",
            waited: Duration::from_secs(1),
        },
        &l,
    )
    .to_string();
    assert!(e.starts_with("rank 5:") && e.contains("[4, 7]"), "{e}");
    let e = between_hosts(
        CommError::PeerLost {
            rank: 1,
            peer: 2,
            op: "allreduce",
            detail: "gone".into(),
        },
        &l,
    )
    .to_string();
    assert!(e.starts_with("rank 4:") && e.contains("peer rank 8"), "{e}");
}
