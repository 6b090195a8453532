//! The `rollout` command: records rollouts from an SGLang server (placeholder until the command lands).

fn main() {
    eprintln!(
        "usage: rollout --url <http://host:port> ... (not implemented yet; see rollout-client/README.md)"
    );
    std::process::exit(2);
}
