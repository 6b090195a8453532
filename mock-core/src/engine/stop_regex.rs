//! `stop_regex` (0.5.15 and later): patterns searched, after each token, in the text of the scheduler's tail window
//! (`Req._check_str_based_finish`), and the window's length that `SamplingParams.normalize` derives from them
//! (`get_max_seq_length`).
//!
//! SGLang searches with Python's `re`. The mock compiles each pattern with `fancy-regex` (Perl syntax with
//! look-around and back-references, as Python's) after translating what the two read differently (`MODEL.md`
//! section 8.2): Python's `$` also matches before a final newline and its `\Z` is the end of the text; inside a
//! class `[` and `&` are literals and `\b` is a backspace; a `{` that opens no valid repeat is a literal, and
//! `{,n}` is `{0,n}`. An escape of an ASCII letter that Python does not define is its `re.error`.

use std::fmt;
use std::sync::Arc;

use fancy_regex::{Expr, LookAround, Regex};

/// `MAX_LEN` of `sampling_params.py`: the length `get_max_seq_length` gives an unbounded repeat and every
/// construct it does not measure (look-around, back-references, `[^x]`).
const UNMEASURED: u64 = 1 << 30;

/// The escapes of ASCII letters that Python's `re` defines outside a class (`sre_parse.CATEGORIES`, `ESCAPES`
/// and the numeric forms) and inside one; any other letter is `bad escape`.
const LETTERS_OUTSIDE: &str = "abBdDfnrsStvwWxuUNAZ";
const LETTERS_INSIDE: &str = "abdDfnrsStvwWxuUN";

/// One compiled `stop_regex` pattern.
#[derive(Clone)]
pub struct StopRegex {
    pattern: Arc<str>,
    regex: Arc<Regex>,
    /// `get_max_seq_length(pattern)`: the most characters a match spans, as SGLang counts them.
    max_len: u64,
}

impl StopRegex {
    /// Compiles `pattern`. The error is Python's `re.error` text where Python refuses the pattern, otherwise the
    /// engine's; SGLang's `normalize` lets `re.error` escape, so either is the request's uncaught 500.
    pub fn compile(pattern: &str) -> Result<StopRegex, String> {
        let measured = translate(pattern, false)?;
        let tree = Expr::parse_tree(&measured).map_err(|e| e.to_string())?;
        let max_len = max_len(&tree.expr);
        let regex = Regex::new(&translate(pattern, true)?).map_err(|e| e.to_string())?;
        Ok(StopRegex {
            pattern: pattern.into(),
            regex: Arc::new(regex),
            max_len,
        })
    }

    /// The pattern as the request gave it: what `finish_reason.matched` reports.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// `get_max_seq_length`: the tail window is one token longer than this (in tokens, as SGLang counts it).
    pub fn max_len(&self) -> u64 {
        self.max_len
    }

    /// `re.search(pattern, text) is not None`. An error is the engine giving up (its backtracking bound), which
    /// 0.5.23's scheduler answers as for an invalid pattern: the request's abort.
    pub fn search(&self, text: &str) -> Result<bool, String> {
        self.regex.is_match(text).map_err(|e| e.to_string())
    }
}

impl PartialEq for StopRegex {
    fn eq(&self, other: &StopRegex) -> bool {
        self.pattern == other.pattern
    }
}

impl fmt::Debug for StopRegex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StopRegex").field(&self.pattern).finish()
    }
}

/// `_max_length_from_subpattern` over the parsed pattern: a literal character, a class or `.` count one, a
/// group its content, an alternation its longest branch, a bounded repeat its bound times its content, an
/// assertion nothing, and everything else (an unbounded repeat included) `MAX_LEN`.
fn max_len(expr: &Expr) -> u64 {
    match expr {
        Expr::Empty | Expr::Assertion(_) | Expr::KeepOut | Expr::ContinueFromPreviousMatchEnd => 0,
        Expr::Any { .. } => 1,
        Expr::Literal { val, .. } => val.chars().count() as u64,
        Expr::Concat(children) => children
            .iter()
            .fold(0, |total, child| total.saturating_add(max_len(child))),
        Expr::Alt(children) => children.iter().map(max_len).max().unwrap_or(0),
        Expr::Group(child) => max_len(child),
        Expr::Repeat { hi: usize::MAX, .. } => UNMEASURED,
        Expr::Repeat { child, hi, .. } => (*hi as u64).saturating_mul(max_len(child)),
        // Word boundaries are zero-width (`AT`); `[^x]` of one character is `NOT_LITERAL`, which Python's
        // measure does not handle.
        Expr::Delegate { size: 0, .. } => 0,
        Expr::Delegate { inner, .. } if negates_one_char(inner) => UNMEASURED,
        Expr::Delegate { .. } => 1,
        // `\Z` arrives as `\z` (`translate`); any other look-around is `ASSERT`, which is not measured.
        Expr::LookAround(_, LookAround::LookAhead | LookAround::LookAheadNeg)
        | Expr::LookAround(_, LookAround::LookBehind | LookAround::LookBehindNeg)
        | Expr::Backref { .. }
        | Expr::BackrefWithRelativeRecursionLevel { .. }
        | Expr::AtomicGroup(_)
        | Expr::BackrefExistsCondition(_)
        | Expr::Conditional { .. }
        | Expr::SubroutineCall(_)
        | Expr::UnresolvedNamedSubroutineCall { .. } => UNMEASURED,
    }
}

/// Whether a class is `[^c]` of one character, literal or escaped (`[^\n]`): `sre_parse` makes that
/// `NOT_LITERAL`.
fn negates_one_char(class: &str) -> bool {
    let Some(body) = class
        .strip_prefix("[^")
        .and_then(|rest| rest.strip_suffix(']'))
    else {
        return false;
    };
    let mut chars = body.chars();
    match (chars.next(), chars.next(), chars.next()) {
        (Some(c), None, None) => c != '\\',
        (Some('\\'), Some(e), None) => !e.is_ascii_alphanumeric() || "afnrtv".contains(e),
        _ => false,
    }
}

/// What the pattern read last, for Python's repeat errors.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    /// The start, a `(` or a `|`, or an assertion: a repeat here has nothing to repeat.
    Nothing,
    /// Something a repeat may follow.
    Atom,
    /// A repeat, which a `?` (lazy) or a `+` (possessive) may still modify.
    Repeat,
    /// A modified repeat.
    Modified,
}

/// Python's pattern in `fancy-regex`'s syntax, or Python's `re.error` text for the mistakes `sre_parse` reports
/// first (bad escapes, parentheses, repeats, an open class), with its positions in characters.
/// `python_dollar`: `$` as Python reads it without `MULTILINE`, the end or before a final newline (for
/// matching); without it `$` stays an assertion (for measuring).
fn translate(pattern: &str, python_dollar: bool) -> Result<String, String> {
    let multiline = has_multiline_flag(pattern);
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut groups: Vec<usize> = Vec::new();
    let mut last = Last::Nothing;
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        match c {
            '\\' => {
                let Some(&e) = chars.get(at + 1) else {
                    return Err(format!("bad escape (end of pattern) at position {at}"));
                };
                push_escape(&mut out, e, at, LETTERS_OUTSIDE, ('Z', "\\z"))?;
                last = if "bBAZ".contains(e) {
                    Last::Nothing
                } else {
                    Last::Atom
                };
                at += 2;
            }
            '[' => {
                at = class(&chars, at, &mut out)?;
                last = Last::Atom;
            }
            '(' => {
                groups.push(at);
                out.push('(');
                at += 1;
                last = Last::Nothing;
                if chars.get(at) == Some(&'?') {
                    at = extension(&chars, at, &mut out, &mut groups, &mut last)?;
                }
            }
            ')' => {
                if groups.pop().is_none() {
                    return Err(format!("unbalanced parenthesis at position {at}"));
                }
                out.push(')');
                at += 1;
                last = Last::Atom;
            }
            '|' => {
                out.push('|');
                at += 1;
                last = Last::Nothing;
            }
            '^' | '$' => {
                if c == '$' && python_dollar && !multiline {
                    out.push_str("(?=\\n?\\z)");
                } else {
                    out.push(c);
                }
                at += 1;
                last = Last::Nothing;
            }
            '*' | '+' | '?' | '{' => {
                let bounds = if c == '{' {
                    repeat_bounds(&chars[at..])
                } else {
                    Some((String::from(c), 1))
                };
                let Some((written, len)) = bounds else {
                    // A `{` that opens no repeat is a literal.
                    out.push_str("\\{");
                    at += 1;
                    last = Last::Atom;
                    continue;
                };
                last = match (last, c) {
                    (Last::Nothing, _) => {
                        return Err(format!("nothing to repeat at position {at}"));
                    }
                    (Last::Repeat, '?' | '+') => Last::Modified,
                    (Last::Repeat | Last::Modified, _) => {
                        return Err(format!("multiple repeat at position {at}"));
                    }
                    (Last::Atom, _) => Last::Repeat,
                };
                out.push_str(&written);
                at += len;
            }
            '}' => {
                out.push_str("\\}");
                at += 1;
                last = Last::Atom;
            }
            _ => {
                out.push(c);
                at += 1;
                last = Last::Atom;
            }
        }
    }
    if let Some(open) = groups.last() {
        return Err(format!(
            "missing ), unterminated subpattern at position {open}"
        ));
    }
    Ok(out)
}

/// The escape `\e` at `at`: Python's `bad escape` for an ASCII letter it does not define (`letters`), else the
/// escape for `fancy-regex`, `renamed` (Python's letter, `fancy-regex`'s spelling) where the two differ.
fn push_escape(
    out: &mut String,
    e: char,
    at: usize,
    letters: &str,
    renamed: (char, &str),
) -> Result<(), String> {
    if e.is_ascii_alphabetic() && !letters.contains(e) {
        return Err(format!("bad escape \\{e} at position {at}"));
    }
    if e == renamed.0 {
        out.push_str(renamed.1);
    } else {
        out.push('\\');
        out.push(e);
    }
    Ok(())
}

/// A class from its `[` at `open`: in Python `[` and `&` are literals inside one, a `]` first is a literal, and
/// `\b` is a backspace. Returns the position after its `]`.
fn class(chars: &[char], open: usize, out: &mut String) -> Result<usize, String> {
    out.push('[');
    let mut at = open + 1;
    if chars.get(at) == Some(&'^') {
        out.push('^');
        at += 1;
    }
    let first = at;
    while let Some(&c) = chars.get(at) {
        match c {
            ']' if at > first => {
                out.push(']');
                return Ok(at + 1);
            }
            '\\' => {
                let Some(&e) = chars.get(at + 1) else {
                    break;
                };
                push_escape(out, e, at, LETTERS_INSIDE, ('b', "\\x08"))?;
                at += 2;
                continue;
            }
            '[' | ']' | '&' | '~' => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
        at += 1;
    }
    Err(format!("unterminated character set at position {open}"))
}

/// A group's `(?...` from its `?` at `at`: look-around, named groups and back-references, non-capturing and
/// flag groups as Python spells them, a comment dropped. Returns the position after what it read.
fn extension(
    chars: &[char],
    mut at: usize,
    out: &mut String,
    groups: &mut Vec<usize>,
    last: &mut Last,
) -> Result<usize, String> {
    let text: String = chars[at..chars.len().min(at + 3)].iter().collect();
    let until = |from: usize, end: char| chars[from..].iter().position(|&c| c == end);
    if text.starts_with("?#") {
        // `(?#...)`: a comment, which Python skips and `fancy-regex` has no syntax for.
        let Some(len) = until(at, ')') else {
            return Err(format!(
                "missing ), unterminated comment at position {}",
                at - 1
            ));
        };
        out.pop();
        groups.pop();
        *last = Last::Atom;
        return Ok(at + len + 1);
    }
    if text.starts_with("?P=") {
        // `(?P=name)`: a back-reference, one atom.
        let Some(len) = until(at, ')') else {
            return Err(format!(
                "missing ), unterminated name at position {}",
                at + 3
            ));
        };
        out.extend(&chars[at..at + len + 1]);
        groups.pop();
        *last = Last::Atom;
        return Ok(at + len + 1);
    }
    if text.starts_with("?(") {
        // `(?(1)yes|no)`: the condition is copied whole; the branches follow as a group's content.
        let Some(len) = until(at + 2, ')') else {
            return Err(format!(
                "missing ), unterminated name at position {}",
                at + 2
            ));
        };
        let end = at + 2 + len + 1;
        out.extend(&chars[at..end]);
        return Ok(end);
    }
    let prefix = ["?P<", "?<=", "?<!", "?:", "?=", "?!", "?>"]
        .into_iter()
        .find(|p| text.starts_with(p));
    if let Some(prefix) = prefix {
        let mut end = at + prefix.chars().count();
        if prefix == "?P<" {
            end += until(end, '>').map_or(0, |len| len + 1);
        }
        out.extend(&chars[at..end]);
        return Ok(end);
    }
    if let Some(&next) = chars.get(at + 2).filter(|_| text.starts_with("?<")) {
        return Err(format!("unknown extension ?<{next} at position {at}"));
    }
    // Flags: `(?imsx)` for the whole pattern, `(?i-s:...)` for a group.
    out.push('?');
    at += 1;
    while let Some(&c) = chars
        .get(at)
        .filter(|c| c.is_ascii_alphabetic() || **c == '-')
    {
        out.push(c);
        at += 1;
    }
    match chars.get(at) {
        Some(')') => {
            out.push(')');
            groups.pop();
            Ok(at + 1)
        }
        Some(':') => {
            out.push(':');
            Ok(at + 1)
        }
        _ => Err(format!(
            "unknown extension ?{} at position {}",
            chars.get(at).map_or(String::new(), char::to_string),
            at - 1
        )),
    }
}

/// A repeat `{m}`, `{m,}`, `{,n}`, `{,}` or `{m,n}` at the start of `chars`, written for `fancy-regex` (`{0,n}`,
/// `{0,}`), and its length in characters. Anything else after a `{` is, in Python, a literal `{`.
fn repeat_bounds(chars: &[char]) -> Option<(String, usize)> {
    let end = chars.iter().position(|&c| c == '}')?;
    let inner: String = chars[1..end].iter().collect();
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let written = match inner.split_once(',') {
        Some((lo, hi)) if digits(lo) && digits(hi) => {
            format!("{{{},{hi}}}", if lo.is_empty() { "0" } else { lo })
        }
        None if !inner.is_empty() && digits(&inner) => format!("{{{inner}}}"),
        Some(_) | None => return None,
    };
    Some((written, end + 1))
}

/// Whether an inline flag group (`(?m)`, `(?im:...)`) turns `MULTILINE` on somewhere in the pattern.
fn has_multiline_flag(pattern: &str) -> bool {
    pattern.match_indices("(?").any(|(at, _)| {
        pattern[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .any(|c| c == 'm')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `get_max_seq_length` of SGLang's `sampling_params.py`, worked by hand from `sre_parse`'s trees.
    #[test]
    fn the_measure_is_sglangs() {
        let len = |p: &str| StopRegex::compile(p).unwrap().max_len();
        assert_eq!(len("abc"), 3);
        assert_eq!(len("a\\d"), 2);
        assert_eq!(len("(ab|c)d"), 3);
        assert_eq!(len("x{2,5}"), 5);
        assert_eq!(len("(?:ab){3}"), 6);
        assert_eq!(len("\\bend$"), 3);
        assert_eq!(len("^A\\Z"), 1);
        assert_eq!(len("[a-z]?"), 1);
        assert_eq!(len("a+"), UNMEASURED);
        assert_eq!(len("[^a]"), UNMEASURED);
        assert_eq!(len("[^ab]"), 1);
        assert_eq!(len("(?=a)b"), UNMEASURED + 1);
        assert_eq!(len(""), 0);
    }

    /// The places where Python's `re` and `fancy-regex` read a pattern differently.
    #[test]
    fn patterns_mean_what_they_mean_in_python() {
        let found = |p: &str, text: &str| StopRegex::compile(p).unwrap().search(text).unwrap();
        // `$` matches before a final newline, not before any other.
        assert!(found("end$", "the end\n"));
        assert!(!found("end$", "the end\n\n"));
        assert!(found("(?m)end$", "the end\nmore"));
        // `\Z` is the very end.
        assert!(!found("end\\Z", "the end\n"));
        assert!(found("end\\Z", "the end"));
        // In a class `[` is a literal and `\b` a backspace.
        assert!(found("[[]", "a[b"));
        assert!(found("[\\b]", "a\u{8}"));
        // A `{` that is no repeat is a literal; `{,2}` is `{0,2}`.
        assert!(found("a{x}", "a{x}"));
        assert!(found("^ba{,2}c$", "bac"));
        assert!(found("\\d{2}", "x42"));
        // Look-around and back-references, as Python has them.
        assert!(found("(?<=Answer: )\\d+", "Answer: 42"));
        assert!(found("(a)\\1", "xaa"));
        assert!(found("(a)?(?(1)b|c)", "xc"));
        assert!(!found("(a)(?(1)b|c)", "xac"));
    }

    #[test]
    fn python_s_bad_escapes_are_refused() {
        assert_eq!(
            StopRegex::compile("a\\z").unwrap_err(),
            "bad escape \\z at position 1"
        );
        assert!(StopRegex::compile("[\\A]").is_err());
        assert!(StopRegex::compile("(").is_err());
        assert!(StopRegex::compile("[ab").is_err());
    }
}
