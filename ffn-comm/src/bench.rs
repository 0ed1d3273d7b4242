//! Allreduce timing behind `ffn bench comm` (reported like nccl-tests: algbw = bytes / time,
//! busbw = algbw * 2(n-1)/n).

use std::time::Instant;

use crate::{CommError, Communicator};

/// One measured message size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllreduceSample {
    /// Message size in bytes.
    pub bytes: usize,
    /// Timed iterations.
    pub iters: usize,
    /// Seconds per allreduce.
    pub time_s: f64,
}

/// Times `allreduce_sum` at every size (bytes, multiples of 4), each for about `seconds`.
pub fn time_allreduce<C: Communicator + ?Sized>(
    comm: &mut C,
    sizes: &[usize],
    seconds: f64,
) -> Result<Vec<AllreduceSample>, CommError> {
    let mut out = Vec::new();
    for &bytes in sizes {
        let mut buf = vec![1.0f32; bytes / 4];
        let mut op = |c: &mut C| c.allreduce_sum(&mut buf);
        out.push(time_op(comm, bytes, seconds, &mut op)?);
    }
    Ok(out)
}

/// Times the MPI library's own `MPI_Allreduce` (into a separate buffer) at every size: the
/// baseline of the MPI backend.
#[cfg(feature = "mpi")]
pub fn time_raw_mpi_allreduce(
    comm: &mut crate::mpi_backend::MpiComm,
    sizes: &[usize],
    seconds: f64,
) -> Result<Vec<AllreduceSample>, CommError> {
    let mut out = Vec::new();
    for &bytes in sizes {
        let send = vec![1.0f32; bytes / 4];
        let mut recv = vec![0.0f32; bytes / 4];
        let mut op = |c: &mut crate::mpi_backend::MpiComm| c.raw_allreduce(&send, &mut recv);
        out.push(time_op(comm, bytes, seconds, &mut op)?);
    }
    Ok(out)
}

/// Times one collective `op`: warms up, picks an iteration count (rank 0 decides, everyone follows), and times the loop.
pub fn time_op<C: Communicator + ?Sized>(
    comm: &mut C,
    bytes: usize,
    seconds: f64,
    op: &mut dyn FnMut(&mut C) -> Result<(), CommError>,
) -> Result<AllreduceSample, CommError> {
    op(comm)?;
    comm.barrier()?;
    let t = Instant::now();
    op(comm)?;
    let once = t.elapsed().as_secs_f64().max(1e-7);
    let mut iters = ((seconds / once).ceil() as u64)
        .clamp(3, 100_000)
        .to_le_bytes();
    comm.broadcast_bytes(&mut iters, 0)?;
    let iters = u64::from_le_bytes(iters);
    comm.barrier()?;
    let t = Instant::now();
    for _ in 0..iters {
        op(comm)?;
    }
    comm.barrier()?;
    let time_s = t.elapsed().as_secs_f64() / iters as f64;
    Ok(AllreduceSample {
        bytes,
        iters: iters as usize,
        time_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::LocalComm;

    #[test]
    fn every_rank_times_every_size_with_the_same_iteration_count() {
        let results = LocalComm::run(3, |c| time_allreduce(c, &[4, 4096], 0.01)).unwrap();
        for samples in &results {
            assert_eq!(
                samples.iter().map(|s| s.bytes).collect::<Vec<_>>(),
                [4, 4096]
            );
            assert!(samples.iter().all(|s| s.iters >= 3 && s.time_s > 0.0));
        }
        // Rank 0 decides the iteration count; every rank follows (else the collectives mismatch).
        for (a, b) in results[0].iter().zip(&results[2]) {
            assert_eq!(a.iters, b.iters);
        }
    }
}
