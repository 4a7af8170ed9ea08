//! The `redis-cli` examples of a docs page: every ```` ```console ```` block, read as a
//! terminal session.
//!
//! - `$ redis-cli ARGS...` is a command (a line ending in `\` goes on on the next), its
//!   arguments split as a shell splits them (spaces; single and double quotes);
//! - `$ sleep SECONDS` is time passing (the replay moves the server's clock by that much);
//! - every other line is what the last command printed, as `redis-cli` prints to a terminal;
//!   ` # ...` after the text (a space before the `#`) is a reader's note, not output, and a
//!   line `...` stands for any number of lines left out.

/// One step of a session.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// `redis-cli` with these arguments, and the lines it must print.
    Call {
        /// The arguments after `redis-cli`.
        args: Vec<String>,
        /// The expected output, notes stripped (`...` kept as the wildcard).
        expected: Vec<String>,
        /// The page's line of the `$ redis-cli` prompt, for messages.
        line: usize,
    },
    /// `sleep` for this many milliseconds.
    Sleep { ms: i64, line: usize },
}

/// The line standing for any number of output lines.
pub const ELIDED: &str = "...";

/// The console blocks of `markdown`, in order, each a list of steps; or why a block cannot
/// be replayed (a command other than `redis-cli` or `sleep`, output before any command, a
/// bad quote), naming its line.
pub fn sessions(markdown: &str) -> Result<Vec<Vec<Step>>, String> {
    let mut sessions = Vec::new();
    let mut current: Option<Vec<Step>> = None;
    let mut fence: Option<String> = None;
    let mut pending: Option<(String, usize)> = None;
    for (index, raw) in markdown.lines().enumerate() {
        let number = index + 1;
        let trimmed = raw.trim_start();
        if let Some(open) = &fence {
            if trimmed.starts_with(open.as_str())
                && trimmed.trim_start_matches('`').trim().is_empty()
            {
                if let Some(steps) = current.take() {
                    if let Some((text, line)) = pending.take() {
                        return Err(format!(
                            "line {line}: `{text}` ends in `\\` at the block's end"
                        ));
                    }
                    sessions.push(steps);
                }
                fence = None;
                continue;
            }
            let Some(steps) = current.as_mut() else {
                continue;
            };
            if let Some((text, line)) = pending.take() {
                let joined = format!("{} {}", text, raw.trim());
                push_prompt(steps, &joined, line, &mut pending)?;
                continue;
            }
            if let Some(command) = raw.strip_prefix("$ ") {
                push_prompt(steps, command, number, &mut pending)?;
                continue;
            }
            match steps.last_mut() {
                Some(Step::Call { expected, .. }) => expected.push(strip_note(raw)),
                _ => {
                    return Err(format!(
                        "line {number}: output `{raw}` before any `$ redis-cli`"
                    ));
                }
            }
            continue;
        }
        if trimmed.starts_with("```") {
            let ticks: String = trimmed.chars().take_while(|&c| c == '`').collect();
            let info = trimmed.trim_start_matches('`').trim();
            if info.split([',', ' ']).next() == Some("console") {
                current = Some(Vec::new());
            }
            fence = Some(ticks);
        }
    }
    Ok(sessions)
}

/// Adds the step a prompt's text (`redis-cli ...`, `sleep ...`) stands for, or keeps it in
/// `pending` when it ends in `\`.
fn push_prompt(
    steps: &mut Vec<Step>,
    text: &str,
    line: usize,
    pending: &mut Option<(String, usize)>,
) -> Result<(), String> {
    let text = text.trim_end();
    if let Some(head) = text.strip_suffix('\\') {
        *pending = Some((head.trim_end().to_string(), line));
        return Ok(());
    }
    let words = split_words(text).map_err(|why| format!("line {line}: {why}"))?;
    match words.split_first() {
        Some((program, args)) if program == "redis-cli" => steps.push(Step::Call {
            args: args.to_vec(),
            expected: Vec::new(),
            line,
        }),
        Some((program, [seconds])) if program == "sleep" => {
            let seconds: f64 = seconds
                .parse()
                .map_err(|_| format!("line {line}: sleep takes seconds (got `{seconds}`)"))?;
            steps.push(Step::Sleep {
                ms: (seconds * 1000.0).round() as i64,
                line,
            });
        }
        _ => {
            return Err(format!(
                "line {line}: `$ {text}`: a replayed block runs `redis-cli` and `sleep` only"
            ));
        }
    }
    Ok(())
}

/// An output line without its reader's note (` # ...`), trailing spaces trimmed.
fn strip_note(line: &str) -> String {
    let cut = line
        .match_indices(" # ")
        .map(|(at, _)| at)
        .chain(line.strip_suffix(" #").map(str::len))
        .min()
        .unwrap_or(line.len());
    line[..cut].trim_end().to_string()
}

/// Splits a command line as a shell does for plain words, quotes and a `#` comment (no
/// variables, no escapes inside single quotes).
pub fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '#' if !in_word => break,
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' | '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some(end) if end == c => break,
                        Some('\\') if c == '"' => word.extend(chars.next()),
                        Some(other) => word.push(other),
                        None => return Err(format!("unclosed {c} in `{text}`")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// Whether `actual` matches `expected`, where a line [`ELIDED`] matches any run of lines.
pub fn matches(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == ELIDED => {
            (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => match actual.split_first() {
            Some((line, others)) => line == first && matches(rest, others),
            None => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_reads_prompts_continuations_notes_and_sleeps() {
        let page = "text\n```console\n$ redis-cli RL.MULTI 2 a b \\\n    FIXED 1 1 'x y'  # a note\n1) (integer) 1   # admitted\n...\n$ sleep 0.25\n```\n```text\n$ not replayed\n```\n";
        let sessions = sessions(page).unwrap();
        assert_eq!(
            sessions,
            vec![vec![
                Step::Call {
                    args: ["RL.MULTI", "2", "a", "b", "FIXED", "1", "1", "x y"]
                        .map(String::from)
                        .to_vec(),
                    expected: vec!["1) (integer) 1".into(), "...".into()],
                    line: 3,
                },
                Step::Sleep { ms: 250, line: 7 },
            ]]
        );
    }

    #[test]
    fn other_programs_and_stray_output_are_refused() {
        assert!(sessions("```console\n$ curl x\n```\n").is_err());
        assert!(sessions("```console\nhello\n```\n").is_err());
    }

    #[test]
    fn elision_matches_any_run() {
        let lines = |text: &str| text.lines().map(String::from).collect::<Vec<_>>();
        assert!(matches(&lines("a\n...\nd"), &lines("a\nb\nc\nd")));
        assert!(matches(&lines("a\n...\nd"), &lines("a\nd")));
        assert!(!matches(&lines("a\n...\nd"), &lines("a\nb")));
        assert!(!matches(&lines("a\nb"), &lines("a\nb\nc")));
    }
}
