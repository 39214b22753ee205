//! Fuzz target: the stream decoder (`eventpipe::source::decode::Decoder`), fed the input line by
//! line. The invariants are in `check_decoder`.
fn main() {
    afl::fuzz!(|data: &[u8]| eventpipe_fuzz::check_decoder(data));
}
