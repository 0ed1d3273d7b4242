//! Models derived from checkpoints that hold no optimiser state: weight averages (`ffn average`)
//! and deepened models (`ffn deepen`). Each records what it was made from under its own key of the
//! checkpoint's training configuration; that record is how `ffn train --resume` recognises (and
//! refuses) them.

use serde_json::{Value, json};

/// The key of a weight average's record ([`crate::average`]).
pub const AVERAGED: &str = "averaged";
/// The key of a deepened model's record ([`crate::deepen`]).
pub const DEEPENED: &str = "deepened";

/// Each derivation's key and what it makes, as an error message names it.
const DERIVATIONS: [(&str, &str); 2] = [
    (AVERAGED, "a weight average of checkpoints (ffn average)"),
    (DEEPENED, "a deepened model (ffn deepen)"),
];

/// Adds `record` under `key` to a training configuration (making it an object when it is not).
pub fn record(training_config: &mut Value, key: &str, record: Value) {
    match training_config {
        Value::Object(map) => {
            map.insert(key.into(), record);
        }
        other => *other = json!({ key: record }),
    }
}

/// What derived the model of `training_config` (e.g. "a deepened model (ffn deepen)"); `None`
/// for a checkpoint written by training.
pub fn derived_by(training_config: &Value) -> Option<&'static str> {
    DERIVATIONS
        .iter()
        .find(|(key, _)| training_config.get(key).is_some())
        .map(|&(_, what)| what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_found_and_training_checkpoints_are_not_derived() {
        let mut tc = json!({ "config": { "lr": "0.001" } });
        assert_eq!(derived_by(&tc), None);
        record(&mut tc, DEEPENED, json!({ "depth": 8 }));
        assert_eq!(derived_by(&tc), Some("a deepened model (ffn deepen)"));
        assert_eq!(tc["config"]["lr"], "0.001");
        let mut null = Value::Null;
        record(&mut null, AVERAGED, json!({ "steps": [1, 2] }));
        assert!(derived_by(&null).unwrap().contains("ffn average"));
    }
}
