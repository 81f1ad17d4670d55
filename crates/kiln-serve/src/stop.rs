//! `stop` strings: generated text is released as it comes, except a tail that could still
//! grow into a stop string, which is held back until it cannot; the text ends before the
//! first stop string found (which is not sent).

/// Finds stop strings in a stream of text pieces.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings ignored).
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), held: String::new() }
    }

    /// Adds `piece`; returns the text now safe to send and whether a stop string ended the text.
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        self.held.push_str(piece);
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.held.truncate(at);
            return (std::mem::take(&mut self.held), true);
        }
        // Hold back the longest tail that begins some stop string.
        let keep = (1..=self.held.len())
            .rev()
            .filter(|&n| self.held.is_char_boundary(self.held.len() - n))
            .find(|&n| {
                let tail = &self.held[self.held.len() - n..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(0);
        let tail = self.held.split_off(self.held.len() - keep);
        (std::mem::replace(&mut self.held, tail), false)
    }

    /// The text held back, when generation ends for another reason.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = vec![];
        for p in pieces {
            let (text, hit) = m.push(p);
            out.push(text);
            if hit {
                return (out, true);
            }
        }
        out.push(m.finish());
        (out, false)
    }

    #[test]
    fn stops_across_pieces_and_holds_back_only_prefixes() {
        assert_eq!(
            run(&["END"], &["ab", "cE", "N", "Dxyz"]),
            (vec!["ab".into(), "c".into(), "".into(), "".into()], true)
        );
        // "EN" then "x": not a stop after all, released.
        assert_eq!(run(&["END"], &["aEN", "x"]), (vec!["a".into(), "ENx".into(), "".into()], false));
        // The earliest of several stops wins; multi-byte text splits on char boundaries.
        assert_eq!(run(&["é!", "zz"], &["ééé", "!zz"]).0.concat(), "éé");
        assert_eq!(run(&[], &["a", "b"]).0.concat(), "ab");
    }
}
