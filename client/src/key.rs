//! Key templates (`tenant:{tenant}`) and the inputs a check fills them with.
//!
//! The placeholder syntax is Rust's `format!`: `{name}` is replaced by the input `name`, and a
//! literal brace is doubled. Doubling matters because Redis Cluster hash tags are braces too:
//! `rl:{{{tenant}}}` renders as `rl:{acme}`, so every limit of tenant `acme` written that way
//! lands in one slot (and one `RL.MULTI`).

use std::fmt;

/// Why a key template is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateError {
    /// The template is empty.
    Empty,
    /// A `{` without its `}`, or a lone `}` (write `{{` and `}}` for literal braces).
    UnbalancedBrace,
    /// `{}` or a placeholder name with characters other than ASCII letters, digits, `_`, `-`.
    BadPlaceholder(String),
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "a key template cannot be empty"),
            Self::UnbalancedBrace => write!(
                f,
                "unbalanced brace in key template (write {{{{ and }}}} for literal braces)"
            ),
            Self::BadPlaceholder(name) => write!(
                f,
                "bad placeholder {{{name}}}: names are ASCII letters, digits, '_' and '-'"
            ),
        }
    }
}

impl std::error::Error for TemplateError {}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Input(String),
}

/// A parsed key template such as `rl:{{{tenant}}}:{route}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyTemplate {
    text: String,
    segments: Vec<Segment>,
}

impl KeyTemplate {
    /// Parses a template; see the [module docs](self) for the syntax.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        if text.is_empty() {
            return Err(TemplateError::Empty);
        }
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => return Err(TemplateError::UnbalancedBrace),
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => return Err(TemplateError::UnbalancedBrace),
                        }
                    }
                    let valid = !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                    if !valid {
                        return Err(TemplateError::BadPlaceholder(name));
                    }
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    segments.push(Segment::Input(name));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(Self {
            text: text.to_string(),
            segments,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The names of the inputs the template uses, in order (repeats included).
    pub fn inputs(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|segment| match segment {
            Segment::Input(name) => Some(name.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// How specific the key is: the number of distinct inputs it depends on. A per-user key
    /// (`{tenant}:{user}`) is more specific than a per-tenant one, which is more specific than
    /// a global one.
    pub fn specificity(&self) -> usize {
        let mut names: Vec<&str> = self.inputs().collect();
        names.sort_unstable();
        names.dedup();
        names.len()
    }

    /// Renders the key from `inputs`, or names the first input that is missing.
    pub fn render(&self, inputs: &Inputs) -> Result<String, MissingInput> {
        let mut key = String::with_capacity(self.text.len().saturating_add(16));
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => key.push_str(text),
                Segment::Input(name) => {
                    let value = inputs.get(name).ok_or_else(|| MissingInput(name.clone()))?;
                    key.push_str(value);
                }
            }
        }
        Ok(key)
    }
}

impl fmt::Display for KeyTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A check named an input that was not given (`tenant` for `tenant:{tenant}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingInput(pub String);

impl fmt::Display for MissingInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the key template needs the input '{}'", self.0)
    }
}

impl std::error::Error for MissingInput {}

/// The values a check fills key templates with: API key, tenant, route...
///
/// A handful of pairs, so a vector beats a map; a later value for the same name replaces the
/// earlier one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inputs {
    pairs: Vec<(String, String)>,
}

impl Inputs {
    /// No inputs (enough for policies whose keys have no placeholder).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the input `name`.
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.set(name, value);
        self
    }

    /// Sets the input `name`.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        let value = value.into();
        match self.pairs.iter_mut().find(|(n, _)| *n == name) {
            Some(pair) => pair.1 = value,
            None => self.pairs.push((name, value)),
        }
    }

    /// The value of the input `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_placeholders_and_doubled_braces() {
        let template = KeyTemplate::parse("rl:{{{tenant}}}:{route}").unwrap();
        let inputs = Inputs::new()
            .with("tenant", "acme")
            .with("route", "/search");
        assert_eq!(template.render(&inputs).unwrap(), "rl:{acme}:/search");
        assert_eq!(template.inputs().collect::<Vec<_>>(), ["tenant", "route"]);
        assert_eq!(template.specificity(), 2);
    }

    #[test]
    fn names_the_missing_input() {
        let template = KeyTemplate::parse("user:{user}").unwrap();
        let error = template
            .render(&Inputs::new().with("tenant", "x"))
            .unwrap_err();
        assert_eq!(error, MissingInput("user".into()));
        assert_eq!(error.to_string(), "the key template needs the input 'user'");
    }

    #[test]
    fn refuses_malformed_templates() {
        assert_eq!(KeyTemplate::parse(""), Err(TemplateError::Empty));
        assert_eq!(
            KeyTemplate::parse("a{b"),
            Err(TemplateError::UnbalancedBrace)
        );
        assert_eq!(
            KeyTemplate::parse("a}b"),
            Err(TemplateError::UnbalancedBrace)
        );
        assert_eq!(
            KeyTemplate::parse("a{}"),
            Err(TemplateError::BadPlaceholder(String::new()))
        );
        assert_eq!(
            KeyTemplate::parse("a{b c}"),
            Err(TemplateError::BadPlaceholder("b c".into()))
        );
    }

    #[test]
    fn a_global_key_has_no_inputs() {
        let template = KeyTemplate::parse("rl:global").unwrap();
        assert_eq!(template.specificity(), 0);
        assert_eq!(template.render(&Inputs::new()).unwrap(), "rl:global");
    }

    #[test]
    fn later_inputs_replace_earlier_ones() {
        let inputs = Inputs::new().with("a", "1").with("a", "2");
        assert_eq!(inputs.get("a"), Some("2"));
        let template = KeyTemplate::parse("{a}:{a}").unwrap();
        assert_eq!(template.specificity(), 1);
        assert_eq!(template.render(&inputs).unwrap(), "2:2");
    }
}
