//! Descriptor values in the config: exact, or with `*` wildcards (trailing, as the reference
//! has always had, or inner, since its change that added wildcards anywhere in a value).

/// A config `value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValuePattern {
    /// Matches this value only.
    Exact(String),
    /// Matches values made of these literal pieces in order, anything between them (the text
    /// split at each `*`; the first piece is a prefix, the last a suffix), and the pattern
    /// as written.
    Glob(Vec<String>, String),
}

impl ValuePattern {
    /// The pattern a config value spells.
    pub fn parse(text: &str) -> Self {
        if text.contains('*') {
            Self::Glob(
                text.split('*').map(str::to_string).collect(),
                text.to_string(),
            )
        } else {
            Self::Exact(text.to_string())
        }
    }

    /// The value as written in the config.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Exact(text) | Self::Glob(_, text) => text,
        }
    }

    /// Whether it has a `*`.
    pub fn is_wildcard(&self) -> bool {
        matches!(self, Self::Glob(..))
    }

    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        match self {
            Self::Exact(exact) => exact == value,
            Self::Glob(pieces, _) => glob_matches(pieces, value),
        }
    }
}

/// Literal pieces in order: the first at the start, the last at the end, the others
/// anywhere between, each after the previous (leftmost placement is enough for `*` globs).
fn glob_matches(pieces: &[String], value: &str) -> bool {
    let Some((first, rest)) = pieces.split_first() else {
        return value.is_empty();
    };
    let Some(mut remaining) = value.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return remaining.is_empty();
    };
    for piece in middle {
        match remaining.find(piece.as_str()) {
            Some(at) => {
                remaining = remaining
                    .get(at.saturating_add(piece.len())..)
                    .unwrap_or("")
            }
            None => return false,
        }
    }
    remaining.ends_with(last.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_trailing_and_inner() {
        let trailing = ValuePattern::parse("/api/*");
        assert!(trailing.matches("/api/"));
        assert!(trailing.matches("/api/users"));
        assert!(!trailing.matches("/ap"));
        let inner = ValuePattern::parse("/users/*/posts");
        assert!(inner.matches("/users/42/posts"));
        assert!(inner.matches("/users//posts"));
        assert!(!inner.matches("/users/42/posts/1"));
        assert!(!inner.matches("/users/posts"));
        let two = ValuePattern::parse("a*b*c");
        assert!(two.matches("abc"));
        assert!(two.matches("a-b-b-c"));
        assert!(!two.matches("acb"));
        let any = ValuePattern::parse("*");
        assert!(any.matches(""));
        assert!(any.matches("x"));
        assert_eq!(ValuePattern::parse("x"), ValuePattern::Exact("x".into()));
        // "ab" must not be counted as both the prefix and the suffix of "a*ab".
        assert!(!ValuePattern::parse("ab*ab").matches("ab"));
        assert!(ValuePattern::parse("ab*ab").matches("abab"));
    }
}
