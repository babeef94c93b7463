//! Stop strings over streamed text: text that might be the start of a stop string is held
//! back until it is known not to be, so a client never sees part of a stop string.

/// Streams text through, ending it at the first stop string.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// Empty stop strings are ignored.
    pub fn new(stops: &[String]) -> Self {
        let stops = stops.iter().filter(|s| !s.is_empty()).cloned().collect();
        Self {
            stops,
            held: String::new(),
            stopped: false,
        }
    }

    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Feed a piece of text; returns what can be released now. After a stop string is seen,
    /// returns the text before it and then nothing.
    pub fn push(&mut self, piece: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.held.push_str(piece);
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            self.stopped = true;
            self.held.truncate(at);
            return std::mem::take(&mut self.held);
        }
        let keep = self.partial_suffix_len();
        let release = self.held.len() - keep;
        let out = self.held[..release].to_string();
        self.held.drain(..release);
        out
    }

    /// Text still held at the end of generation (it was not a stop string after all).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Longest suffix of the held text that is a proper prefix of some stop string.
    fn partial_suffix_len(&self) -> usize {
        let h = &self.held;
        let mut best = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if i > best && h.ends_with(&s[..i]) {
                    best = i;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for p in pieces {
            out += &m.push(p);
        }
        out += &m.finish();
        (out, m.stopped())
    }

    #[test]
    fn table() {
        assert_eq!(
            run(&["END"], &["ab", "cE", "N", "Dxyz"]),
            ("abc".into(), true)
        );
        assert_eq!(run(&["END"], &["ab", "cE", "Nx"]), ("abcENx".into(), false));
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
        assert_eq!(run(&["\n\n", "."], &["one", ". two"]), ("one".into(), true));
        assert_eq!(run(&["ção"], &["a", "çã", "o!"]), ("a".into(), true));
    }

    #[test]
    fn held_text_is_never_released_early() {
        let mut m = StopMatcher::new(&["STOP".to_string()]);
        assert_eq!(m.push("xST"), "x");
        assert_eq!(m.push("O"), "");
        assert_eq!(m.push("P"), "");
        assert!(m.stopped());
    }
}
