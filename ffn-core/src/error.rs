//! The error type of ffn-core.

use alloc::string::String;

/// Errors of the engine: wrong buffer lengths, invalid configurations, bad optimiser state.
///
/// Every variant names what was being checked and, where it applies, the expected and the actual value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// A buffer has the wrong number of elements.
    #[error("{what}: expected {expected} values, found {actual}")]
    LengthMismatch {
        /// What the buffer is, e.g. `parameters of a depth-9 convstack_3d`.
        what: String,
        /// The length that was expected.
        expected: usize,
        /// The length that was found.
        actual: usize,
    },
    /// A model configuration is invalid (the message names the field).
    #[error("invalid model configuration: {0}")]
    InvalidConfig(String),
    /// Saved optimiser state does not fit this optimiser.
    #[error("optimizer state: {0}")]
    OptimizerState(String),
    /// An unknown name was given where one of a fixed set was expected.
    #[error("unknown {what} {found:?}: expected one of {expected}")]
    UnknownName {
        /// What was being named, e.g. `optimizer`.
        what: String,
        /// The accepted names, comma separated.
        expected: String,
        /// The name that was given.
        found: String,
    },
    /// An option is out of range.
    #[error("{option} must be {expected}, found {actual}")]
    OutOfRange {
        /// The option, as the command line spells it (e.g. `--batch`).
        option: &'static str,
        /// The accepted range, e.g. `>= 1`.
        expected: &'static str,
        /// The value that was given.
        actual: String,
    },
    /// A thread pool could not start.
    #[error("cannot start the thread pool ({threads} threads): {reason}")]
    ThreadPool {
        /// The threads asked for.
        threads: usize,
        /// Why it failed.
        reason: String,
    },
}
