//! The one conformance suite that every backend runs: in-process for `local`, and inside every rank
//! process for `shm`, `mpi` and `zmq` (through the hidden `ffn comm-selftest` command).
//!
//! Inputs are a deterministic function of (seed, rank, index) with a wide range of magnitudes, so the
//! order of additions shows in the bits. Every rank computes the expected result of every collective
//! itself in the order the communicator declares ([`Communicator::summation`]: rank order
//! [`reduce::sum_in_rank_order`], or host then rank order [`reduce::sum_in_host_order`] for
//! `hier`), so a check proves at once that the result is right,
//! that it is the same on every rank, that it is the same run after run, and that all backends agree.
//! A digest of all results is also compared across ranks through the backend itself, and returned so
//! that callers can compare runs and backends (of the same summation order).

use crate::reduce::{self, Summation};
use crate::{CommError, Communicator};
use ffn_core::hash::{FNV_OFFSET, fnv1a_extend};

/// A conformance failure: a communication error or a wrong result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConformanceError {
    /// A collective returned an error.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// A collective returned wrong bits.
    #[error("rank {rank}: {check}: element {index}: expected {expected}, found {actual}")]
    Mismatch {
        /// Which check (collective and length).
        check: String,
        /// The rank that saw it.
        rank: usize,
        /// First differing element.
        index: usize,
        /// The expected value (and its bits).
        expected: String,
        /// What the backend produced.
        actual: String,
    },
}

/// Which parts of the suite to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuiteOptions {
    /// Seed of the inputs (results are compared with a reference computed from the same seed).
    pub seed: u64,
    /// Also reduce a 64 MiB buffer.
    pub large: bool,
    /// Number of back-to-back collectives in the repetition check.
    pub repeats: usize,
}

impl SuiteOptions {
    /// Everything except the 64 MiB buffer.
    pub fn quick() -> Self {
        SuiteOptions {
            seed: 7,
            large: false,
            repeats: 24,
        }
    }

    /// Everything, including the 64 MiB buffer.
    pub fn full() -> Self {
        SuiteOptions {
            large: true,
            ..Self::quick()
        }
    }
}

/// What a passing run produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuiteReport {
    /// Number of checks that passed.
    pub checks: usize,
    /// FNV-1a digest of every result of every collective; identical on all ranks, in every run and
    /// for every backend with the same number of ranks and seed.
    pub digest: u64,
}

/// Lengths of the allreduce checks: empty, one, odd, fewer than the ranks, uneven, 1 MiB.
pub fn allreduce_lengths(size: usize) -> Vec<usize> {
    let mut v = vec![0, 1, 7];
    if size > 1 {
        v.push(size - 1);
    }
    v.extend([1000, 4099, 262_144]);
    v
}

/// Number of `f32` in 64 MiB.
pub const LARGE_LEN: usize = 16 << 20;

/// Runs every check in order and returns the digest of all results.
pub fn run_all(
    comm: &mut dyn Communicator,
    opts: &SuiteOptions,
) -> Result<SuiteReport, ConformanceError> {
    let mut d = Digest::new();
    let mut checks = 0;
    comm.barrier()?;
    for len in allreduce_lengths(comm.size()) {
        d.add(check_allreduce(comm, len, opts.seed)?);
        checks += 1;
    }
    d.add(check_repeated(comm, opts.repeats, opts.seed)?);
    d.add(check_broadcast(comm, opts.seed)?);
    d.add(check_broadcast_bytes(comm)?);
    d.add(check_mean(comm, opts.seed)?);
    d.add(check_many(comm, opts.seed)?);
    check_barrier(comm)?;
    checks += 6;
    if opts.large {
        d.add(check_large(comm)?);
        checks += 1;
    }
    check_same_on_all_ranks(comm, d.0, "suite digest")?;
    Ok(SuiteReport {
        checks: checks + 1,
        digest: d.0,
    })
}

/// The input of `rank` at `index`: sign, exponent (2^-8 ..= 2^7) and mantissa from a hash.
pub fn input_value(seed: u64, rank: usize, index: usize) -> f32 {
    let h = splitmix64(seed ^ ((rank as u64) << 40) ^ (index as u64).wrapping_mul(0x9E37_79B9));
    let mantissa = (h & 0x7F_FFFF) as u32;
    let exponent = 127 - 8 + ((h >> 23) & 15) as u32;
    let sign = ((h >> 27) & 1) as u32;
    f32::from_bits((sign << 31) | (exponent << 23) | mantissa)
}

/// Fills `buf` with the inputs of `rank`.
pub fn fill_input(buf: &mut [f32], seed: u64, rank: usize) {
    for (i, x) in buf.iter_mut().enumerate() {
        *x = input_value(seed, rank, i);
    }
}

/// The reference result of an allreduce of the inputs of ranks `0..size`, added in the order
/// `summation`.
pub fn expected_sum(len: usize, size: usize, seed: u64, summation: Summation) -> Vec<f32> {
    let inputs: Vec<Vec<f32>> = (0..size)
        .map(|r| {
            let mut v = vec![0.0; len];
            fill_input(&mut v, seed, r);
            v
        })
        .collect();
    let parts: Vec<&[f32]> = inputs.iter().map(|v| v.as_slice()).collect();
    let mut out = vec![0.0; len];
    summation.sum(&mut out, &parts);
    out
}

/// One allreduce of `len` values, checked bit for bit against the reference and across ranks.
pub fn check_allreduce(
    comm: &mut dyn Communicator,
    len: usize,
    seed: u64,
) -> Result<u64, ConformanceError> {
    let mut buf = vec![0.0; len];
    fill_input(&mut buf, seed, comm.rank());
    comm.allreduce_sum(&mut buf)?;
    let check = format!("allreduce_sum of {len} values on {} ranks", comm.size());
    compare(
        comm.rank(),
        &check,
        &expected_sum(len, comm.size(), seed, comm.summation()),
        &buf,
    )?;
    let digest = digest_f32(&buf);
    check_same_on_all_ranks(comm, digest, &check)?;
    Ok(digest)
}

/// The 64 MiB allreduce.
pub fn check_large(comm: &mut dyn Communicator) -> Result<u64, ConformanceError> {
    check_allreduce(comm, LARGE_LEN, 11)
}

/// `repeats` allreduces of varying lengths back to back, with nothing in between, then checked.
pub fn check_repeated(
    comm: &mut dyn Communicator,
    repeats: usize,
    seed: u64,
) -> Result<u64, ConformanceError> {
    let lens = [5usize, 1, 3000, 0, 64, 70_001];
    let mut bufs: Vec<Vec<f32>> = (0..repeats)
        .map(|i| {
            let mut v = vec![0.0; lens[i % lens.len()]];
            fill_input(&mut v, seed + i as u64, comm.rank());
            v
        })
        .collect();
    for b in bufs.iter_mut() {
        comm.allreduce_sum(b)?;
    }
    let mut d = Digest::new();
    for (i, b) in bufs.iter().enumerate() {
        let check = format!("back-to-back allreduce #{i} of {} values", b.len());
        compare(
            comm.rank(),
            &check,
            &expected_sum(b.len(), comm.size(), seed + i as u64, comm.summation()),
            b,
        )?;
        d.add(digest_f32(b));
    }
    Ok(d.0)
}

/// Broadcast from every root, of several lengths.
pub fn check_broadcast(comm: &mut dyn Communicator, seed: u64) -> Result<u64, ConformanceError> {
    let mut d = Digest::new();
    for root in 0..comm.size() {
        for len in [0usize, 1, 7, 100_003] {
            let mut buf = vec![0.0; len];
            // Non-roots start from different data, which the broadcast must overwrite.
            fill_input(&mut buf, seed + 1000, comm.rank());
            comm.broadcast(&mut buf, root)?;
            let mut want = vec![0.0; len];
            fill_input(&mut want, seed + 1000, root);
            compare(
                comm.rank(),
                &format!("broadcast of {len} values from root {root}"),
                &want,
                &buf,
            )?;
            d.add(digest_f32(&buf));
        }
    }
    Ok(d.0)
}

/// Byte broadcasts of lengths that are not multiples of four.
pub fn check_broadcast_bytes(comm: &mut dyn Communicator) -> Result<u64, ConformanceError> {
    let mut d = Digest::new();
    let root = comm.size() - 1;
    for len in [0usize, 3, 1001] {
        let mut buf: Vec<u8> = (0..len).map(|i| (i * 31 + comm.rank() * 7) as u8).collect();
        comm.broadcast_bytes(&mut buf, root)?;
        let want: Vec<u8> = (0..len).map(|i| (i * 31 + root * 7) as u8).collect();
        if buf != want {
            let index = buf.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            return Err(ConformanceError::Mismatch {
                check: format!("broadcast_bytes of {len} bytes from root {root}"),
                rank: comm.rank(),
                index,
                expected: want[index].to_string(),
                actual: buf[index].to_string(),
            });
        }
        d.add(fnv1a_extend(d.0, &buf));
    }
    Ok(d.0)
}

/// `allreduce_mean` equals the sum (in the communicator's order) divided by the number of ranks.
pub fn check_mean(comm: &mut dyn Communicator, seed: u64) -> Result<u64, ConformanceError> {
    let len = 1003;
    let mut buf = vec![0.0; len];
    fill_input(&mut buf, seed + 2000, comm.rank());
    comm.allreduce_mean(&mut buf)?;
    let n = comm.size() as f32;
    let want: Vec<f32> = expected_sum(len, comm.size(), seed + 2000, comm.summation())
        .iter()
        .map(|x| x / n)
        .collect();
    compare(comm.rank(), "allreduce_mean of 1003 values", &want, &buf)?;
    Ok(digest_f32(&buf))
}

/// The fused `allreduce_sum_many` equals separate allreduces of each buffer.
pub fn check_many(comm: &mut dyn Communicator, seed: u64) -> Result<u64, ConformanceError> {
    let lens = [3usize, 0, 1000, 7, 20_000];
    let mut owned: Vec<Vec<f32>> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let mut v = vec![0.0; len];
            fill_input(&mut v, seed + 3000 + i as u64, comm.rank());
            v
        })
        .collect();
    {
        let mut views: Vec<&mut [f32]> = owned.iter_mut().map(|v| v.as_mut_slice()).collect();
        comm.allreduce_sum_many(&mut views)?;
    }
    let mut d = Digest::new();
    for (i, b) in owned.iter().enumerate() {
        let want = expected_sum(
            b.len(),
            comm.size(),
            seed + 3000 + i as u64,
            comm.summation(),
        );
        compare(
            comm.rank(),
            &format!("allreduce_sum_many buffer {i} of {} values", b.len()),
            &want,
            b,
        )?;
        d.add(digest_f32(b));
    }
    Ok(d.0)
}

/// Several barriers in a row, then an allreduce to prove the group is still in step.
pub fn check_barrier(comm: &mut dyn Communicator) -> Result<(), ConformanceError> {
    for _ in 0..5 {
        comm.barrier()?;
    }
    let mut one = [1.0f32];
    comm.allreduce_sum(&mut one)?;
    let want = [comm.size() as f32];
    compare(comm.rank(), "allreduce after barriers", &want, &one)
}

/// Broadcasts rank 0's `digest` and fails unless this rank's is the same.
pub fn check_same_on_all_ranks(
    comm: &mut dyn Communicator,
    digest: u64,
    what: &str,
) -> Result<(), ConformanceError> {
    let mut bytes = digest.to_le_bytes();
    comm.broadcast_bytes(&mut bytes, 0)?;
    let root = u64::from_le_bytes(bytes);
    if root != digest {
        return Err(ConformanceError::Mismatch {
            check: format!("{what}: result digest compared with rank 0"),
            rank: comm.rank(),
            index: 0,
            expected: format!("{root:016x} (rank 0)"),
            actual: format!("{digest:016x}"),
        });
    }
    Ok(())
}

fn compare(rank: usize, check: &str, want: &[f32], got: &[f32]) -> Result<(), ConformanceError> {
    if want.len() != got.len() {
        return Err(ConformanceError::Mismatch {
            check: check.into(),
            rank,
            index: want.len().min(got.len()),
            expected: format!("length {}", want.len()),
            actual: format!("length {}", got.len()),
        });
    }
    if let Some(index) = want
        .iter()
        .zip(got)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        return Err(ConformanceError::Mismatch {
            check: check.into(),
            rank,
            index,
            expected: format!("{:e} (bits {:08x})", want[index], want[index].to_bits()),
            actual: format!("{:e} (bits {:08x})", got[index], got[index].to_bits()),
        });
    }
    Ok(())
}

/// FNV-1a over the bits of `buf` (with its length).
pub fn digest_f32(buf: &[f32]) -> u64 {
    fnv1a_extend(
        fnv1a_extend(FNV_OFFSET, &(buf.len() as u64).to_le_bytes()),
        reduce::as_bytes(buf),
    )
}

struct Digest(u64);

impl Digest {
    fn new() -> Self {
        Digest(FNV_OFFSET)
    }
    fn add(&mut self, x: u64) {
        self.0 = fnv1a_extend(self.0, &x.to_le_bytes());
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_keep_their_values() {
        // Pinned with the digest code before it moved to `ffn_core::hash` (commit a453a5f): ranks of
        // different builds compare these digests, so their values must never change.
        let buf: Vec<f32> = (0..10).map(|i| i as f32 * 0.5 - 1.0).collect();
        assert_eq!(digest_f32(&buf), 0x6ecb_fdc2_d68e_61be);
        let mut d = Digest::new();
        d.add(42);
        d.add(digest_f32(&[]));
        assert_eq!(d.0, 0xff43_7158_a392_e932);
    }

    #[test]
    fn inputs_make_the_summation_order_visible() {
        // Some element of three ranks' inputs must differ between (a + b) + c and a + (b + c);
        // otherwise the suite could not tell reduction orders apart.
        let differs = (0..1000).any(|i| {
            let [a, b, c] = [0, 1, 2].map(|r| input_value(7, r, i));
            ((a + b) + c).to_bits() != (a + (b + c)).to_bits()
        });
        assert!(differs);
    }

    #[test]
    fn compare_reports_the_first_wrong_element() {
        let e = compare(1, "x", &[1.0, 2.0], &[1.0, 3.0])
            .unwrap_err()
            .to_string();
        assert!(e.contains("element 1") && e.contains("rank 1"), "{e}");
        assert!(compare(0, "x", &[1.0], &[1.0, 2.0]).is_err());
        assert!(compare(0, "x", &[-0.0], &[0.0]).is_err());
    }

    #[test]
    fn the_suite_checks_the_declared_summation_order() {
        /// The local backend (rank order) claiming the hierarchical order of 2 hosts x 2.
        struct Claims(crate::local::LocalComm, Summation);
        impl Communicator for Claims {
            fn rank(&self) -> usize {
                self.0.rank()
            }
            fn size(&self) -> usize {
                self.0.size()
            }
            fn backend(&self) -> &'static str {
                "claims"
            }
            fn summation(&self) -> Summation {
                self.1
            }
            fn allreduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
                self.0.allreduce_sum(buf)
            }
            fn broadcast_bytes(&mut self, buf: &mut [u8], root: usize) -> Result<(), CommError> {
                self.0.broadcast_bytes(buf, root)
            }
            fn barrier(&mut self) -> Result<(), CommError> {
                self.0.barrier()
            }
        }
        for (claim, fails) in [
            (Summation::RankOrder, false),
            (Summation::HostThenRank { local_size: 4 }, false),
            (Summation::HostThenRank { local_size: 2 }, true),
        ] {
            let errs = crate::local::LocalComm::run(4, |c| {
                let mut w = Claims(crate::local::LocalComm::solo(), claim);
                std::mem::swap(&mut w.0, c);
                let out = check_allreduce(&mut w, 1000, 7);
                std::mem::swap(&mut w.0, c);
                Ok::<_, CommError>(out.is_err())
            })
            .unwrap();
            assert_eq!(errs, vec![fails; 4], "{claim:?}");
        }
    }

    #[test]
    fn a_wrong_backend_fails_the_suite() {
        /// A communicator that sums in reverse rank order (as a careless backend might).
        struct Reversed(crate::local::LocalComm);
        impl Communicator for Reversed {
            fn rank(&self) -> usize {
                self.0.rank()
            }
            fn size(&self) -> usize {
                self.0.size()
            }
            fn backend(&self) -> &'static str {
                "reversed"
            }
            fn allreduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
                let n = self.size();
                let mut parts = vec![vec![0.0; buf.len()]; n];
                for (r, p) in parts.iter_mut().enumerate() {
                    if r == self.rank() {
                        p.copy_from_slice(buf);
                    }
                    self.0.broadcast(p, r)?;
                }
                let rev: Vec<&[f32]> = parts.iter().rev().map(|p| p.as_slice()).collect();
                reduce::sum_in_rank_order(buf, &rev);
                Ok(())
            }
            fn broadcast_bytes(&mut self, buf: &mut [u8], root: usize) -> Result<(), CommError> {
                self.0.broadcast_bytes(buf, root)
            }
            fn barrier(&mut self) -> Result<(), CommError> {
                self.0.barrier()
            }
        }
        let errs = crate::local::LocalComm::run(3, |c| {
            let mut r = Reversed(crate::local::LocalComm::solo());
            std::mem::swap(&mut r.0, c);
            let out = check_allreduce(&mut r, 1000, 7);
            std::mem::swap(&mut r.0, c);
            Ok::<_, CommError>(out.is_err())
        })
        .unwrap();
        assert_eq!(errs, vec![true; 3]);
    }
}
