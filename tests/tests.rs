//! The regression suite for slime issue #1976: the mock server, the rollout client and GRPO, driven together.
