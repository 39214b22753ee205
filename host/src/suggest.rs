//! "Did you mean …?": the known name closest to a mistyped one, for unknown config keys, plugin
//! names and sink options alike.

/// How similar (Jaro-Winkler, 0 to 1) a known name must be to a mistyped one to be suggested.
pub const MIN_SIMILARITY: f64 = 0.8;

/// The name of `known` most similar to `given`, if any is at least [`MIN_SIMILARITY`] similar.
pub fn closest<'a>(given: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (strsim::jaro_winkler(given, k), k))
        .filter(|(score, _)| *score >= MIN_SIMILARITY)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_similar_name_is_suggested() {
        assert_eq!(closest("max_bach", ["concurrency", "max_batch", "max_batch_bytes"]), Some("max_batch"));
        assert_eq!(closest("webhok", ["jsonl", "webhook", "otlp"]), Some("webhook"));
        assert_eq!(closest("zzz", ["jsonl", "webhook"]), None);
    }
}
