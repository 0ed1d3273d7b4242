//! The optimiser chosen on the command line of `ffn train` (implementations in `ffn_core::optim`).

use ffn_core::optim::{Adam, Momentum, Optimizer, Sgd};

use crate::commands::train::Args;

/// Optimiser names.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerKind {
    /// Plain SGD (google/ffn's default).
    Sgd,
    /// SGD with momentum (`--momentum`).
    Momentum,
    /// Adam (`--adam-beta1/2`, `--adam-epsilon`).
    Adam,
}

/// Builds the optimiser of `args`.
pub fn make_optimizer(args: &Args) -> Box<dyn Optimizer> {
    match args.optimizer {
        OptimizerKind::Sgd => Box::new(Sgd),
        OptimizerKind::Momentum => Box::new(Momentum::new(args.momentum)),
        OptimizerKind::Adam => Box::new(Adam::new(
            args.adam_beta1,
            args.adam_beta2,
            args.adam_epsilon,
        )),
    }
}
