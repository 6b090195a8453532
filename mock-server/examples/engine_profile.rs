//! Generates a fixed amount of tokens with logprobs, for profiling the engine with `perf stat` or callgrind.

use std::sync::Arc;

use mock_server::engine::{ItemRequest, generate};
use mock_server::model::{Model, ModelConfig};

fn main() {
    let model = Arc::new(Model::new(ModelConfig::default()).expect("default config is valid"));
    let mut total = 0usize;
    for i in 0..200u64 {
        let mut item = ItemRequest::new(model.tokenizer().encode("The capital of France is"));
        item.params.max_new_tokens = 1024;
        item.params.ignore_eos = true;
        item.return_logprob = true;
        item.sample_index = i;
        total += generate(model.clone(), item).output_ids().len();
    }
    println!("{total} tokens");
}
