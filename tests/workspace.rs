//! Cross-crate checks that the four crates link together.

#[test]
fn crates_share_one_version() {
    assert_eq!(ffn_core::VERSION, ffn_comm::VERSION);
    assert_eq!(ffn_core::VERSION, ffn_io::VERSION);
}
