//! YAML read with bounds: a file's size and count are checked before it is read, and its
//! nesting is counted event by event before any tree is built, so neither the parser's
//! recursive descent nor the rule reader's can run out of stack on a hostile file. An
//! alias counts as deep as the node it names, so anchors cannot stack depth either.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use saphyr::{MarkedYaml, YamlLoader};
use saphyr_parser::{Event, Parser, SpannedEventReceiver};

/// What a config directory may hold (the command line's).
pub use crate::cli::FileBounds;

/// Why a file's text is refused: the line (0: the whole file) and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The line, from 1 (0 when the whole file is concerned).
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// The first `max_bytes` bytes of a file and one more, so that a file over the bound is
/// told without reading it all (it may also grow while it is read).
pub fn read_head(path: &Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads a file of at most `max_bytes` bytes as UTF-8.
pub fn read_bounded(path: &Path, max_bytes: u64) -> Result<String, Refused> {
    let whole = |reason: String| Refused { line: 0, reason };
    let bytes =
        read_head(path, max_bytes).map_err(|error| whole(format!("cannot read: {error}")))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > max_bytes {
        return Err(whole(format!(
            "the file is larger than {max_bytes} bytes (--config-max-file-bytes)"
        )));
    }
    String::from_utf8(bytes).map_err(|error| whole(format!("not UTF-8 text: {error}")))
}

/// One open collection: its anchor and the height of what it holds so far.
struct Open {
    anchor: usize,
    height: usize,
}

/// The nesting of the events seen so far.
struct Depth {
    max: usize,
    open: Vec<Open>,
    /// The height of every anchored node (a scalar 0, a collection one more than its
    /// highest child), which an alias to it adds where it stands.
    anchors: HashMap<usize, usize>,
}

impl Depth {
    /// Takes one event; `Err` when it would nest deeper than the bound.
    fn see(&mut self, event: &Event<'_>) -> Result<(), String> {
        match event {
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if self.open.len() >= self.max {
                    return Err(self.too_deep());
                }
                self.open.push(Open {
                    anchor: *anchor,
                    height: 1,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(closed) = self.open.pop() {
                    if closed.anchor > 0 {
                        self.anchors.insert(closed.anchor, closed.height);
                    }
                    self.child(closed.height);
                }
            }
            Event::Scalar(_, _, anchor, _) => {
                if *anchor > 0 {
                    self.anchors.insert(*anchor, 0);
                }
                self.child(0);
            }
            Event::Alias(anchor) => {
                let height = self.anchors.get(anchor).copied().unwrap_or(0);
                if self.open.len().saturating_add(height) > self.max {
                    return Err(self.too_deep());
                }
                self.child(height);
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd => {}
        }
        Ok(())
    }

    fn child(&mut self, height: usize) {
        if let Some(parent) = self.open.last_mut() {
            parent.height = parent.height.max(height.saturating_add(1));
        }
    }

    fn too_deep(&self) -> String {
        format!(
            "nested deeper than {} levels (--config-max-depth)",
            self.max
        )
    }
}

/// The documents of `text`, refused before they nest deeper than `max_depth` collections.
/// Scalars are kept as written, so a value such as `007` stays a string.
pub fn documents(text: &str, max_depth: usize) -> Result<Vec<MarkedYaml<'_>>, Refused> {
    let mut loader: YamlLoader<'_, MarkedYaml<'_>> = YamlLoader::default();
    loader.early_parse(false);
    let mut depth = Depth {
        max: max_depth,
        open: Vec::new(),
        anchors: HashMap::new(),
    };
    // The parser's own `load` descends recursively; its events, pulled one by one, do not.
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|error| Refused {
            line: error.marker().line(),
            reason: format!("not YAML: {}", error.info()),
        })?;
        depth.see(&event).map_err(|reason| Refused {
            line: span.start.line(),
            reason,
        })?;
        loader.on_event(event, span);
        if let Some(error) = loader.error() {
            return Err(Refused {
                line: error.marker().line(),
                reason: format!("not YAML: {}", error.info()),
            });
        }
    }
    Ok(loader.into_documents())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::cli::DEFAULT_MAX_DEPTH;

    fn depth_error(text: &str, max: usize) -> Refused {
        documents(text, max).unwrap_err()
    }

    #[test]
    fn counts_block_flow_and_alias_nesting() {
        assert_eq!(documents("a: [[1]]\n", 3).unwrap().len(), 1);
        let refused = depth_error("a:\n  b:\n    c: [1]\n", 3);
        assert_eq!(refused.line, 3);
        assert!(refused.reason.contains("deeper than 3"), "{refused:?}");
        // An alias is as deep as its anchor.
        assert!(documents("a: &x [[1]]\nb: *x\n", 3).is_ok());
        let refused = depth_error("a: &x [[1]]\nb: [*x]\n", 3);
        assert_eq!(refused.line, 2);
        // Stacked anchors add up.
        let stacked = "a: &x [[1]]\nb: &y [*x]\nc: &z [*y]\n";
        assert_eq!(depth_error(stacked, 4).line, 3);
        assert!(documents(stacked, 5).is_ok());
    }

    #[test]
    fn a_hostile_depth_is_refused_without_recursion() {
        let block = format!("domain: deep\ndescriptors:\n{}x\n", "- ".repeat(40_000));
        let refused = depth_error(&block, DEFAULT_MAX_DEPTH);
        assert_eq!(refused.line, 3);
        let flow = format!("a: {}", "[".repeat(100_000));
        assert!(documents(&flow, DEFAULT_MAX_DEPTH).is_err());
    }
}
