//! Ranks as threads of one process: each rank hands its tensor to a shared slot, and once
//! all have, every rank reads all slots in rank order, so all ranks compute the same
//! bytes (the sum is taken in one fixed order, as NCCL's ring is fixed). Tensors on a GPU
//! meet on the host: correct on any devices, and as slow as two copies per collective.
//!
//! A rank whose handle is dropped before the others finish (an error, a panic) breaks the
//! group: the others' collectives return an error instead of waiting for it forever.

use super::{Collective, ExpertSplit, Shard};
use kiln::{Device, Error, Result, Tensor};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// One rank's handle on a group of threads that share a model.
pub struct ThreadGroup {
    shard: Shard,
    shared: Arc<Shared>,
}

struct Shared {
    round: Mutex<Round>,
    changed: Condvar,
}

/// One collective's rendezvous: ranks write their slots, then (`reading`) read them all;
/// the last reader clears the slots for the next collective.
struct Round {
    slots: Vec<Option<Tensor>>,
    count: usize,
    reading: bool,
    broken: bool,
}

impl ThreadGroup {
    /// Handles for ranks `0..world` (their experts split as `experts` says), one to move
    /// into each rank's thread. Every rank must run the same collectives in the same order.
    pub fn new(world: usize, experts: ExpertSplit) -> Result<Vec<ThreadGroup>> {
        Shard::new(0, world, experts)?;
        let round = Round { slots: vec![None; world], count: 0, reading: false, broken: false };
        let shared = Arc::new(Shared { round: Mutex::new(round), changed: Condvar::new() });
        Ok((0..world)
            .map(|rank| ThreadGroup { shard: Shard { rank, world, experts }, shared: shared.clone() })
            .collect())
    }

    fn lock(&self) -> Result<MutexGuard<'_, Round>> {
        self.shared.round.lock().map_err(|_| Error::invalid("collective", "a rank panicked"))
    }

    /// Waits while `blocked`; an error if the group breaks meanwhile.
    fn wait_while<'a>(
        &self,
        mut r: MutexGuard<'a, Round>,
        blocked: impl Fn(&Round) -> bool,
    ) -> Result<MutexGuard<'a, Round>> {
        while blocked(&r) {
            if r.broken {
                return Err(Error::invalid("collective", "another rank left the group"));
            }
            r = self.shared.changed.wait(r).map_err(|_| Error::invalid("collective", "a rank panicked"))?;
        }
        Ok(r)
    }

    /// Every rank's `x` (on the host), in rank order.
    fn exchange(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        let x = x.to_device(Device::Cpu)?;
        let world = self.shard.world;
        // The previous collective must be read by everyone before its slots are reused.
        let mut r = self.wait_while(self.lock()?, |r| r.reading)?;
        r.slots[self.shard.rank] = Some(x);
        r.count += 1;
        if r.count == world {
            (r.count, r.reading) = (0, true);
            self.shared.changed.notify_all();
        }
        let mut r = self.wait_while(r, |r| !r.reading)?;
        let parts: Vec<Tensor> =
            r.slots.iter().map(|s| s.clone().expect("every rank wrote its slot")).collect();
        r.count += 1;
        if r.count == world {
            (r.count, r.reading) = (0, false);
            r.slots.iter_mut().for_each(|s| *s = None);
            self.shared.changed.notify_all();
        }
        Ok(parts)
    }
}

/// Runs `rank` on a thread of its own for each rank of a new `world`-rank group (experts
/// split as `experts` says), handing it that rank's collectives, and returns the ranks' results in rank order, or the first
/// rank's error (a rank that fails breaks the group, so the others fail too rather than
/// wait for it).
pub fn run_ranks<T: Send>(
    world: usize,
    experts: ExpertSplit,
    rank: impl Fn(Arc<dyn Collective>) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let groups = ThreadGroup::new(world, experts)?;
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let rank = &rank;
        let handles: Vec<_> = groups.into_iter().map(|g| s.spawn(move || rank(Arc::new(g)))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::invalid("tensor parallel", "a rank panicked"))))
            .collect()
    });
    // A rank's own error comes before the "left the group" errors it caused in the others.
    let first_cause = results
        .iter()
        .position(|r| matches!(r, Err(e) if !e.to_string().contains("left the group")))
        .unwrap_or(0);
    let mut results = results;
    if results[first_cause].is_err() {
        return Err(results.swap_remove(first_cause).err().expect("an error"));
    }
    results.into_iter().collect()
}

impl Drop for ThreadGroup {
    fn drop(&mut self) {
        if let Ok(mut r) = self.shared.round.lock() {
            r.broken = true;
            self.shared.changed.notify_all();
        }
    }
}

impl Collective for ThreadGroup {
    fn shard(&self) -> Shard {
        self.shard
    }

    fn all_reduce_sum(&self, x: &Tensor) -> Result<Tensor> {
        let parts = self.exchange(x)?;
        parts[1..].iter().try_fold(parts[0].clone(), |sum, p| sum.add(p))?.to_device(x.device())
    }

    fn all_gather(&self, x: &Tensor, dim: isize) -> Result<Tensor> {
        Tensor::cat(&self.exchange(x)?, dim)?.to_device(x.device())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::{DType, Device};

    /// Three ranks' tensors summed and gathered: each rank gets the same result, equal to
    /// the sum and concatenation computed directly.
    #[test]
    fn all_reduce_and_all_gather_agree_on_every_rank() {
        let world = 3;
        let inputs: Vec<Tensor> = (0..world)
            .map(|r| Tensor::randn(&[2, 5], r as u64 + 1, DType::F32, Device::Cpu).unwrap())
            .collect();
        let want_sum = inputs[0].add(&inputs[1]).unwrap().add(&inputs[2]).unwrap().to_vec::<f32>().unwrap();
        let want_cat = Tensor::cat(&inputs, 1).unwrap().to_vec::<f32>().unwrap();
        let results: Vec<(Vec<f32>, Vec<f32>)> = std::thread::scope(|s| {
            let handles: Vec<_> = ThreadGroup::new(world, ExpertSplit::Columns)
                .unwrap()
                .into_iter()
                .zip(&inputs)
                .map(|(g, x)| {
                    s.spawn(move || {
                        // Two rounds: the slots are reused safely.
                        let sum = g.all_reduce_sum(x).unwrap();
                        let cat = g.all_gather(x, 1).unwrap();
                        (sum.to_vec::<f32>().unwrap(), cat.to_vec::<f32>().unwrap())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (sum, cat) in results {
            assert_eq!(sum, want_sum);
            assert_eq!(cat, want_cat);
        }
        assert!(ThreadGroup::new(0, ExpertSplit::Columns).is_err());
    }

    /// A rank that leaves early makes the others' next collective an error, not a hang.
    #[test]
    fn a_rank_leaving_breaks_the_group() {
        let mut group = ThreadGroup::new(2, ExpertSplit::Columns).unwrap();
        let second = group.pop().unwrap();
        let first = group.pop().unwrap();
        let x = Tensor::ones(&[2], DType::F32, Device::Cpu).unwrap();
        let waiting = std::thread::spawn(move || first.all_reduce_sum(&x).map(|_| ()));
        drop(second);
        let err = waiting.join().unwrap().unwrap_err().to_string();
        assert!(err.contains("left the group"), "{err}");
    }

    /// `run_ranks` gives each rank's result in rank order, and when a rank fails, its
    /// error rather than the others' "left the group".
    #[test]
    fn run_ranks_reports_the_failing_rank_s_own_error() {
        let ones = || Tensor::ones(&[1], DType::F32, Device::Cpu);
        let sums = run_ranks(3, ExpertSplit::Columns, |c| c.all_reduce_sum(&ones()?)?.item()).unwrap();
        assert_eq!(sums, [3.0; 3]);
        let err = run_ranks(3, ExpertSplit::Columns, |c| {
            if c.shard().rank == 1 {
                return Err(Error::invalid("test", "rank 1 fails"));
            }
            c.all_reduce_sum(&ones()?).map(|_| ())
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("rank 1 fails"), "{err}");
    }
}
