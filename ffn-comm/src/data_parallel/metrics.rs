//! Training metrics of the whole group: [`DataParallel::sum_tracker`] sums every rank's confusion
//! counts and finished examples of a reporting window, so that the precision, recall, F1 and
//! accuracy in the log describe the examples of all ranks, not rank 0's alone, and every rank
//! reports the same row. The counts travel exactly ([`DataParallel::sum_exact`]).

use anyhow::{Result, anyhow, bail};
use ffn_core::training::tracker::Tracker;

use super::DataParallel;

/// Bits of an `f32` significand: integers up to `2^24` are exact.
const F32_EXACT_BITS: u32 = 24;

/// Bits per limb so that the sum of one limb over `ranks` ranks stays below `2^24`.
fn limb_bits(ranks: usize) -> Result<u32> {
    let rank_bits = usize::BITS - (ranks.max(1) - 1).leading_zeros();
    if rank_bits >= F32_EXACT_BITS {
        bail!("exact sums over {ranks} ranks: expected at most 2^23 ranks");
    }
    Ok(F32_EXACT_BITS - rank_bits)
}

impl DataParallel {
    /// Element-wise sum of `values` over the ranks, exact: each value travels as limbs of
    /// [`limb_bits`] bits in `f32`, whose sums stay below `2^24`. Identity in a group of one.
    /// Collective.
    pub fn sum_exact(&self, values: &[u64]) -> Result<Vec<u64>> {
        if self.size() == 1 {
            return Ok(values.to_vec());
        }
        let bits = limb_bits(self.size())?;
        let limbs = u64::BITS.div_ceil(bits) as usize;
        let mask = (1u64 << bits) - 1;
        let mut buf = Vec::with_capacity(values.len() * limbs);
        for &v in values {
            buf.extend((0..limbs).map(|l| ((v >> (l as u32 * bits)) & mask) as f32));
        }
        let summed = self.sum(buf)?;
        summed
            .chunks_exact(limbs)
            .map(|limbs| {
                let total = limbs
                    .iter()
                    .enumerate()
                    .map(|(l, &s)| (s as u128) << (l as u32 * bits))
                    .sum::<u128>();
                u64::try_from(total)
                    .map_err(|_| anyhow!("exact sum over ranks: {total} overflows u64"))
            })
            .collect()
    }

    /// `window` (this rank's metrics since the last report) with its confusion counts and
    /// finished examples summed over the ranks; the loss sums stay (the loss of every step is
    /// already the group's mean). Collective: every rank calls it at the same steps.
    pub fn sum_tracker(&self, window: Tracker) -> Result<Tracker> {
        let [tp, fp, tn, fn_, examples] =
            self.sum_exact(&[window.tp, window.fp, window.tn, window.fn_, window.examples])?[..]
        else {
            bail!("internal: exact sum returned another number of values");
        };
        Ok(Tracker {
            tp,
            fp,
            tn,
            fn_,
            examples,
            ..window
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Backend;
    use crate::data_parallel::{DataParallelOptions, run};

    #[test]
    fn limbs_keep_every_sum_below_two_to_the_24() {
        for ranks in [1, 2, 3, 16, 1024, 2048, 4096, 5000, 1 << 23] {
            let bits = limb_bits(ranks).unwrap();
            assert!(
                (ranks as u64) * ((1u64 << bits) - 1) < 1 << 24,
                "{ranks} ranks"
            );
        }
        assert!(limb_bits((1 << 23) + 1).is_err());
    }

    #[test]
    fn counts_are_summed_exactly_over_local_ranks() {
        let opts = DataParallelOptions::over(Backend::Local, 3);
        // Values beyond f32's exact range, different on every rank.
        let local = |rank: u64| Tracker {
            tp: (1 << 40) + 12_345_677 * rank,
            fp: 3 + rank,
            tn: u64::from(u32::MAX) + rank,
            fn_: 0,
            loss_sum: 1.5,
            steps: 2,
            examples: 7 * rank,
        };
        let want = Tracker {
            tp: 3 * (1 << 40) + 12_345_677 * 3,
            fp: 12,
            tn: 3 * u64::from(u32::MAX) + 3,
            fn_: 0,
            loss_sum: 1.5,
            steps: 2,
            examples: 21,
        };
        // Every rank gets the same sums.
        run(&opts, |g| {
            let got = g.sum_tracker(local(g.rank() as u64))?;
            anyhow::ensure!(got == want, "rank {}: {got:?}", g.rank());
            Ok(())
        })
        .unwrap();
        let single = DataParallel::single(&DataParallelOptions::default());
        assert_eq!(single.sum_tracker(local(5)).unwrap(), local(5));
        assert_eq!(single.sum_exact(&[u64::MAX]).unwrap(), [u64::MAX]);
    }

    #[test]
    fn a_sum_beyond_u64_is_an_error() {
        let opts = DataParallelOptions::over(Backend::Local, 2);
        let e = run(&opts, |g| g.sum_exact(&[u64::MAX])).unwrap_err();
        assert!(format!("{e:#}").contains("overflows u64"), "{e:#}");
    }
}
