//! Scripted answers applied to a plan: a matching prompt gets the rule's answer as forced tokens.

use crate::engine::PlannedItem;
use crate::model::Tokenizer;
use crate::script::{ScriptFinish, ScriptRule};

/// The first rule matching `input_ids`, if any.
fn matching_rule<'a>(
    rules: &'a [ScriptRule],
    tokenizer: &Tokenizer,
    input_ids: &[u32],
) -> Option<&'a ScriptRule> {
    if rules.is_empty() {
        return None;
    }
    let prompt = tokenizer.decode(input_ids, false);
    rules
        .iter()
        .find(|rule| prompt.contains(rule.prompt_contains.as_str()))
}

/// Force the tokens of the matching rule's answer onto every item of a plan whose prompt matches.
pub(super) fn apply(rules: &[ScriptRule], tokenizer: &Tokenizer, items: &mut [PlannedItem]) {
    if rules.is_empty() {
        return;
    }
    for item in items {
        let Some(rule) = matching_rule(rules, tokenizer, &item.request.input_ids) else {
            continue;
        };
        let mut forced = tokenizer.encode_plain(&rule.answer);
        match rule.finish_reason {
            ScriptFinish::Stop => forced.push(tokenizer.end_of_turn_id()),
            ScriptFinish::Length => {
                let params = &mut item.request.params;
                params.max_new_tokens = params.max_new_tokens.min(forced.len() as u32);
            }
        }
        item.request.forced_output = forced;
    }
}
