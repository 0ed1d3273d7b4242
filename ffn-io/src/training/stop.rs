//! Stopping a training run cleanly on SIGTERM / SIGUSR1: the signal machinery of
//! [`ffn_comm::stop`], which the launcher shares.

pub use ffn_comm::stop::*;
