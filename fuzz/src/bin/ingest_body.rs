//! Fuzz target: the `POST /ingest` body parser (`eventpipe::source::http::decode_ingest_body`).
//! The invariants are in `check_ingest_body`.
fn main() {
    afl::fuzz!(|data: &[u8]| eventpipe_fuzz::check_ingest_body(data));
}
