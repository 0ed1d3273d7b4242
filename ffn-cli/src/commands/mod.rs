//! The subcommands of `ffn`, one module each.

mod selfcheck;

use clap::Subcommand;

/// All subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Quick self-check of the build: model shapes, parameter counts, RNG, compiled-in backends.
    Selfcheck(selfcheck::Args),
}

/// Runs one subcommand.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Selfcheck(args) => selfcheck::run(args),
    }
}
