//! An allreduce among ranks through a backend chosen at run time (`shm`, `mpi`, `zmq`, `local`):
//! every rank sums `(rank + 1) * (i + 1)` over all ranks twice, back to back, and checks the result
//! (`(i + 1) * n (n + 1) / 2`, exact in f32); a wrong sum or a failed collective exits non-zero.
//!
//! - shm: `cargo run -p ffn-comm --example allreduce -- shm [N]`: started without a launcher's rank
//!   variables, the example starts N ranks (default 2) of itself with `ffn_comm::launch` (the
//!   environment `ffn launch` sets); also runs under `ffn launch`.
//! - mpi: `cargo build -p ffn-comm --features mpi --example allreduce`, then
//!   `mpirun -n 2 target/debug/examples/allreduce mpi`.
use ffn_comm::launch::{LaunchOptions, launch};
use ffn_comm::{Backend, CommOptions, WorldInfo, connect};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let backend: Backend = args.get(1).map_or("shm", String::as_str).parse()?;
    if backend.uses_env_world() && WorldInfo::from_env()?.size == 1 {
        let n: usize = args.get(2).map_or(Ok(2), |s| s.parse())?;
        let args = vec![backend.name().to_string(), n.to_string()];
        let code = launch(&LaunchOptions::new(std::env::current_exe()?, args, n))?;
        return match code {
            0 => Ok(()),
            c => Err(format!("the job of {n} ranks failed (exit status {c})").into()),
        };
    }
    let mut comm = connect(backend, &CommOptions::from_env()?)?;
    let (rank, n) = (comm.rank(), comm.size());
    for round in 0..2 {
        let mut buf: Vec<f32> = (0..1000).map(|i| ((rank + 1) * (i + 1)) as f32).collect();
        comm.allreduce_sum(&mut buf)?;
        let wrong = (0..buf.len())
            .filter(|&i| buf[i] != ((i + 1) * n * (n + 1) / 2) as f32)
            .count();
        if wrong > 0 {
            return Err(format!(
                "rank {rank}: {wrong} of {} sums wrong in round {round}",
                buf.len()
            )
            .into());
        }
    }
    println!(
        "rank {rank} of {n} ({}): allreduce sums correct",
        comm.backend()
    );
    Ok(())
}
