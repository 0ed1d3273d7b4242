//! The communication thread: one thread per rank owns the communicator and runs the collectives
//! that the training thread submits, one after the other in submission order, so gradient buckets
//! are reduced while the backward pass is still computing earlier layers.
//!
//! The communicator is created on this thread (MPI is initialised "funneled": the thread that
//! initialises it is the only one that calls it), and dropped there. A failed collective makes the
//! thread answer every later job with the same error at once, so a dead peer turns into an error
//! on the training thread, never a hang (the backends bound every wait by their timeout).

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::{CommError, Communicator};
use anyhow::{Result, anyhow};

/// Creates the communicator on the communication thread.
pub type Factory = Box<dyn FnOnce() -> Result<Box<dyn Communicator>, CommError> + Send>;

/// A collective to run.
enum Job {
    /// Element-wise sum over ranks, in place.
    Sum(Vec<f32>),
    /// Copy `root`'s bytes to every rank.
    Bytes(Vec<u8>, usize),
}

/// What a job produced.
pub enum Payload {
    /// The reduced buffer of a [`CommThread::submit_sum`].
    Floats(Vec<f32>),
    /// The broadcast bytes.
    Bytes(Vec<u8>),
}

/// A finished job: its tag, result and when the collective ran on the communication thread.
pub struct Done {
    /// The tag given at submission.
    pub tag: usize,
    /// The result, or the error text.
    pub result: std::result::Result<Payload, String>,
    /// When the collective started.
    pub started: Instant,
    /// When it finished.
    pub finished: Instant,
}

/// The handle of a rank's communication thread.
pub struct CommThread {
    tx: Option<mpsc::Sender<(usize, Job)>>,
    rx: mpsc::Receiver<Done>,
    handle: Option<JoinHandle<()>>,
    rank: usize,
    size: usize,
    backend: &'static str,
    in_flight: std::cell::Cell<usize>,
}

impl CommThread {
    /// Starts the thread, creates the communicator there, and returns once it is connected.
    pub fn start(factory: Factory) -> Result<Self> {
        let (tx, jobs) = mpsc::channel::<(usize, Job)>();
        let (done_tx, rx) = mpsc::channel::<Done>();
        let (init_tx, init_rx) =
            mpsc::channel::<std::result::Result<(usize, usize, &'static str), String>>();
        let handle = std::thread::Builder::new()
            .name("ffn-comm".into())
            .spawn(move || {
                let mut comm = match factory() {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = init_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = init_tx.send(Ok((comm.rank(), comm.size(), comm.backend())));
                serve(comm.as_mut(), jobs, done_tx);
            })
            .map_err(|e| anyhow!("starting the communication thread: {e}"))?;
        let (rank, size, backend) = match init_rx.recv() {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                let _ = handle.join();
                return Err(anyhow!("joining the job: {e}"));
            }
            Err(_) => {
                let _ = handle.join();
                return Err(anyhow!(
                    "joining the job: the communication thread ended before connecting"
                ));
            }
        };
        Ok(Self {
            tx: Some(tx),
            rx,
            handle: Some(handle),
            rank,
            size,
            backend,
            in_flight: 0.into(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The backend's name.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    fn submit(&self, tag: usize, job: Job) -> Result<()> {
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| anyhow!("communication thread already stopped"))?;
        tx.send((tag, job))
            .map_err(|_| anyhow!("rank {}: the communication thread has ended", self.rank))?;
        self.in_flight.set(self.in_flight.get() + 1);
        Ok(())
    }

    /// Queues an allreduce-sum of `buf`; its [`Done`] comes back from [`CommThread::next`].
    pub fn submit_sum(&self, tag: usize, buf: Vec<f32>) -> Result<()> {
        self.submit(tag, Job::Sum(buf))
    }

    /// Waits for the next finished job (jobs finish in submission order).
    pub fn next(&self) -> Result<Done> {
        let d = self
            .rx
            .recv()
            .map_err(|_| anyhow!("rank {}: the communication thread has ended", self.rank))?;
        self.in_flight.set(self.in_flight.get().saturating_sub(1));
        Ok(d)
    }

    /// Jobs submitted and not yet collected.
    pub fn in_flight(&self) -> usize {
        self.in_flight.get()
    }

    /// Allreduce-sum of `buf`, waiting for the result (no job may be in flight).
    pub fn sum(&self, buf: Vec<f32>) -> Result<Vec<f32>> {
        self.ensure_idle()?;
        self.submit_sum(0, buf)?;
        match self.next()?.result {
            Ok(Payload::Floats(v)) => Ok(v),
            Ok(Payload::Bytes(_)) => Err(anyhow!("internal: a byte result for an allreduce")),
            Err(e) => Err(anyhow!(e)),
        }
    }

    /// Broadcast of `buf` from `root` (every rank passes the same length), waiting for the result.
    pub fn broadcast(&self, buf: Vec<u8>, root: usize) -> Result<Vec<u8>> {
        self.ensure_idle()?;
        self.submit(0, Job::Bytes(buf, root))?;
        match self.next()?.result {
            Ok(Payload::Bytes(v)) => Ok(v),
            Ok(Payload::Floats(_)) => Err(anyhow!("internal: a float result for a broadcast")),
            Err(e) => Err(anyhow!(e)),
        }
    }

    fn ensure_idle(&self) -> Result<()> {
        if self.in_flight() != 0 {
            return Err(anyhow!(
                "internal: {} collectives still in flight",
                self.in_flight()
            ));
        }
        Ok(())
    }
}

impl Drop for CommThread {
    fn drop(&mut self) {
        // Closing the queue ends the thread once its current collective returns (each is bounded
        // by the communicator's timeout); the communicator is dropped on its own thread.
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn serve(
    comm: &mut dyn Communicator,
    jobs: mpsc::Receiver<(usize, Job)>,
    done: mpsc::Sender<Done>,
) {
    let mut broken: Option<String> = None;
    while let Ok((tag, job)) = jobs.recv() {
        let started = Instant::now();
        let result = match (&broken, job) {
            (Some(e), _) => Err(e.clone()),
            (None, job) => {
                let r = match job {
                    Job::Sum(mut buf) => {
                        comm.allreduce_sum(&mut buf).map(|()| Payload::Floats(buf))
                    }
                    Job::Bytes(mut buf, root) => comm
                        .broadcast_bytes(&mut buf, root)
                        .map(|()| Payload::Bytes(buf)),
                };
                r.map_err(|e| {
                    let text = e.to_string();
                    broken = Some(text.clone());
                    text
                })
            }
        };
        if done
            .send(Done {
                tag,
                result,
                started,
                finished: Instant::now(),
            })
            .is_err()
        {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::LocalComm;

    #[test]
    fn collectives_run_in_order_and_a_lost_peer_is_an_error() {
        let group = LocalComm::group(2).unwrap();
        let results: Vec<Result<Vec<f32>>> = std::thread::scope(|s| {
            let hs: Vec<_> = group
                .into_iter()
                .map(|c| {
                    s.spawn(move || -> Result<Vec<f32>> {
                        let t = CommThread::start(Box::new(move || {
                            Ok(Box::new(c) as Box<dyn Communicator>)
                        }))?;
                        let r = t.rank() as f32;
                        t.submit_sum(7, vec![r; 3])?;
                        t.submit_sum(8, vec![10.0 * r; 2])?;
                        let a = t.next()?;
                        let b = t.next()?;
                        assert_eq!((a.tag, b.tag), (7, 8));
                        let bytes = t.broadcast(vec![t.rank() as u8; 4], 1)?;
                        assert_eq!(bytes, vec![1u8; 4]);
                        let mut out = Vec::new();
                        for d in [a, b] {
                            match d.result {
                                Ok(Payload::Floats(v)) => out.extend(v),
                                _ => panic!("allreduce failed"),
                            }
                        }
                        Ok(out)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in results {
            assert_eq!(r.unwrap(), vec![1.0, 1.0, 1.0, 10.0, 10.0]);
        }
        // Rank 1 goes away: rank 0's collective fails, and so does every later one.
        let mut group = LocalComm::group(2).unwrap();
        drop(group.pop());
        let c = group.pop().unwrap();
        let t =
            CommThread::start(Box::new(move || Ok(Box::new(c) as Box<dyn Communicator>))).unwrap();
        let e = t.sum(vec![1.0]).unwrap_err().to_string();
        assert!(e.contains("rank 1"), "{e}");
        assert!(t.broadcast(vec![0], 0).is_err());
    }
}
