//! Prompt text to token ids, either locally or by asking the server that will generate from them.
//!
//! slime tokenizes prompts with the model's Hugging Face tokenizer before sending `input_ids`. A Rust
//! client has no such tokenizer, so by default it asks the server: a `/generate` call with the text,
//! `max_new_tokens: 0` (SGLang's prompt scoring) and `logprob_start_len: 0` returns one
//! `input_token_logprobs` entry per prompt token, and entry `i` carries the id of token `i`. That works
//! on every SGLang version and on the mock, and gives exactly the ids the server itself would use.

use std::fmt;
use std::sync::Arc;

use crate::client::Client;
use crate::error::{ClientError, ResponseError};
use crate::request::{GenerateRequest, SamplingParams, TextInput};

/// Local tokenizer function: text in, ids out.
pub type EncodeFn = dyn Fn(&str) -> Vec<u32> + Send + Sync;

/// How prompt text becomes the `tokens` of a sample.
#[derive(Clone, Default)]
pub enum PromptTokenizer {
    /// Ask the server (one scoring request per prompt).
    #[default]
    Server,
    /// A local function, e.g. the mock's own tokenizer or a binding to a real one.
    Local(Arc<EncodeFn>),
}

impl fmt::Debug for PromptTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PromptTokenizer::Server => f.write_str("PromptTokenizer::Server"),
            PromptTokenizer::Local(_) => f.write_str("PromptTokenizer::Local(..)"),
        }
    }
}

impl PromptTokenizer {
    /// A local tokenizer from a function.
    pub fn local(f: impl Fn(&str) -> Vec<u32> + Send + Sync + 'static) -> PromptTokenizer {
        PromptTokenizer::Local(Arc::new(f))
    }

    /// The token ids of `text`, as the server would tokenize it (no special tokens are added by the
    /// mock; a real server adds whatever its tokenizer adds to a `text` request).
    pub async fn encode(&self, client: &Client, text: &str) -> Result<Vec<u32>, ClientError> {
        match self {
            PromptTokenizer::Local(f) => Ok(f(text)),
            PromptTokenizer::Server => encode_on_server(client, text).await,
        }
    }
}

/// The scoring request whose `input_token_logprobs` list the prompt's ids.
pub fn scoring_request(text: &str) -> GenerateRequest {
    GenerateRequest {
        text: Some(TextInput::One(text.to_owned())),
        sampling_params: SamplingParams {
            max_new_tokens: Some(0),
            ..SamplingParams::default()
        },
        return_logprob: true,
        logprob_start_len: Some(0),
        ..GenerateRequest::default()
    }
}

async fn encode_on_server(client: &Client, text: &str) -> Result<Vec<u32>, ClientError> {
    let turn = client.generate(&scoring_request(text)).await?;
    let ids = turn
        .meta_info
        .input_token_logprobs
        .map(|lps| lps.ids)
        .unwrap_or_default();
    match turn.meta_info.prompt_tokens {
        // Without the ids the prompt cannot be re-sent as `input_ids`; say so rather than guess.
        _ if ids.is_empty() => Err(ClientError::Response {
            url: format!("{}/generate", client.base_url()),
            source: ResponseError::MissingInputLogprobs {
                prompt_tokens: turn.meta_info.prompt_tokens,
            },
        }),
        Some(n) if n != ids.len() => Err(ClientError::Response {
            url: format!("{}/generate", client.base_url()),
            source: ResponseError::InputLogprobsLength {
                prompt_tokens: n,
                entries: ids.len(),
            },
        }),
        _ => Ok(ids),
    }
}
