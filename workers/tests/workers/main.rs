//! The worker crate's integration tests, in one test binary (each module was a binary of its own, and linking
//! each one cost more than running it): every built-in action against local servers, the registry against the
//! catalog, and the worker runtime against an in-process orchestrator.

mod condition_eval;
mod http_request;
mod llm_chat;
mod notify_send;
mod registry;
mod runtime;
mod sleep_action;
mod support;
mod weather_forecast;
