//! Progress bars for the suites that take more than a few seconds. They draw on stderr and
//! only when it is a terminal, so piped output and JSON stay clean.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps labelled `what`; finish it with `finish_and_clear` before printing.
pub fn bar(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} {bar:40} {pos}/{len} {msg:.dim}")
            .expect("template is valid"),
    );
    bar.set_prefix(what.to_string());
    bar
}
