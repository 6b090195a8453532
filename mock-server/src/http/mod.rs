//! The HTTP layer: the axum router with `/generate`, the OpenAI routes and the worker endpoints routers and
//! RL frameworks call, the API-key middleware, and the handlers. Handlers share one [`AppState`].
//!
//! - `routes`: the router, the API-key middleware, SGLang's 404 and 405; `state`: [`AppState`];
//!   `extract`: the body extractors that reject in SGLang's error shape; `error`: how an [`ApiError`] becomes a response; `respond`: response helpers;
//! - `generate`: `/generate` and `execute`, which runs a plan and hands back a typed outcome that each route
//!   encodes; `drive`: the async drivers of the engine's step core (non-stream, and SSE whose events a
//!   route's `Events` writes); `faults`: HTTP-level faults;
//! - `openai`: `/v1/completions`, `/v1/chat/completions`, `/tokenize`, `/detokenize`;
//! - `info`: health, server and model info, load; `admin`: the RL control plane and admin endpoints;
//!   `metrics`: Prometheus; `conn`: a listener whose connections a fault can reset; `server`: [`Server`],
//!   which binds, serves the router and shuts it down; `witness`: recording served items into the ledger,
//!   `/admin/ledger` and `/admin/audit`.

mod admin;
mod conn;
mod drive;
mod error;
mod extract;
mod faults;
mod generate;
mod info;
mod loads;
mod metrics;
mod openai;
mod respond;
mod routes;
mod server;
mod state;
mod witness;

pub(crate) use routes::router;
pub use server::{Server, StartError};
pub use state::AppState;
