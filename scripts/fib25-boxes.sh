# The FIB-25 evaluation boxes, x,y,z offsets of 80^3 boxes in z >= 150 of training_sample2 (the part
# never trained on), sourced by scripts/fib25-select.sh and scripts/fib25-tune.sh.
# Selection boxes choose models and inference settings; none overlaps the held-out box, which is
# scored once per chosen model, for reporting only (models/ffn-rs-fib25/MODEL_CARD.md). The first
# three were the selection boxes until 2026-12-06; the last three were added then.
# The held-out box is 140,30,160 (what `ffn demo` and tests/shipped_model.rs score).
# shellcheck disable=SC2034
selection_boxes=(20,150,160 20,30,160 140,150,160 60,30,160 140,110,160 85,170,160)
