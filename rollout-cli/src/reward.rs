//! A simple verifiable reward for math prompts: the last number of the answer must equal the label.
//!
//! This is the shape of slime's `deepscaler`/`math` reward functions (1 for correct, 0 otherwise)
//! reduced to what a toy run needs: the answer after `</think>` when there is one, its last number,
//! compared with the label as numbers (so `42`, `42.0` and `+42` all match a label of `42`).

/// The last number in `text`: an optional sign, digits, and at most one decimal point between
/// digits (so the last number of `1.2.3` is `2.3`).
pub fn last_number(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let last_digit = bytes.iter().rposition(u8::is_ascii_digit)?;
    let mut start = last_digit;
    let mut seen_dot = false;
    loop {
        while start > 0 && bytes[start - 1].is_ascii_digit() {
            start -= 1;
        }
        if !seen_dot && start >= 2 && bytes[start - 1] == b'.' && bytes[start - 2].is_ascii_digit()
        {
            seen_dot = true;
            start -= 1;
            continue;
        }
        break;
    }
    if start > 0 && matches!(bytes[start - 1], b'-' | b'+') {
        start -= 1;
    }
    Some(&text[start..=last_digit])
}

/// The part of a response that is graded: the text after the last `</think>`, or all of it.
pub fn answer_part(response: &str) -> &str {
    match response.rfind("</think>") {
        Some(i) => &response[i + "</think>".len()..],
        None => response,
    }
}

/// 1.0 when the last number of the answer equals the label's number, else 0.0.
pub fn math_reward(response: &str, label: &str) -> f64 {
    let (Some(got), Some(want)) = (last_number(answer_part(response)), last_number(label)) else {
        return 0.0;
    };
    match (got.parse::<f64>(), want.parse::<f64>()) {
        (Ok(a), Ok(b)) if a == b => 1.0,
        _ => 0.0,
    }
}

/// DAPO's soft overlong punishment (arXiv 2503.14476): 0 for a response of at most
/// `max_len - buffer` tokens, then a linear penalty down to -1 at `max_len`, and -1 beyond.
/// `buffer` is DAPO's `L_cache`; 0 turns the penalty off.
pub fn overlong_penalty(response_len: usize, max_len: usize, buffer: usize) -> f64 {
    if buffer == 0 {
        return 0.0;
    }
    let free = max_len.saturating_sub(buffer);
    if response_len <= free {
        0.0
    } else if response_len <= max_len {
        (free as f64 - response_len as f64) / buffer as f64
    } else {
        -1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_number_cases() {
        let check =
            |text: &str, want: Option<&str>| assert_eq!(last_number(text), want, "{text:?}");
        check("What is 17 + 25? It is 42.", Some("42"));
        check("x = -3", Some("-3"));
        check("3.5 apples", Some("3.5"));
        check("version 1.2.3", Some("2.3"));
        check("no digits", None);
        check("", None);
        check("ends with 7", Some("7"));
        check("a .5 b", Some("5"));
    }

    #[test]
    fn overlong_cases() {
        assert_eq!(overlong_penalty(96, 128, 32), 0.0);
        assert_eq!(overlong_penalty(112, 128, 32), -0.5);
        assert_eq!(overlong_penalty(128, 128, 32), -1.0);
        assert_eq!(overlong_penalty(129, 128, 32), -1.0);
        assert_eq!(overlong_penalty(128, 128, 0), 0.0);
        assert_eq!(overlong_penalty(5, 8, 32), -0.15625);
    }

    #[test]
    fn reward_cases() {
        assert_eq!(math_reward("The answer is 42.", "42"), 1.0);
        assert_eq!(math_reward("42.0", "42"), 1.0);
        assert_eq!(math_reward("<think>maybe 41</think>It is 42", "42"), 1.0);
        assert_eq!(math_reward("<think>42</think>It is 41", "42"), 0.0);
        assert_eq!(math_reward("ka rito mesuvo", "42"), 0.0);
        assert_eq!(math_reward("42", "no label number"), 0.0);
    }
}
