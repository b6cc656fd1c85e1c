//! Cairn's end-to-end, failure-case and crash tests, in one test binary: each module was a binary of its own, and
//! linking the whole stack once per module dominated the suite's build time. The harness is the `cairn-tests`
//! library (`tests/src`). Modules share one process, so nothing here may change process-wide state (environment
//! variables, the current directory, a global tracing subscriber); `observability_traces`, which installs one, is
//! its own binary.
//!
//! Run one module with `cargo test -p cairn-tests --test e2e cases_d21_` (a name filter).

// The REST API: limits, bad input, behaviour, the cases' API checks, finding runs and bulk operations.
mod api_abuse_limits;
mod api_bad_input;
mod api_behaviour;
mod api_cases;
mod api_run_search;

// `cairn bench` across orchestrators.
mod bench_orchestrators;

// The failure cases (`d07` … `d25`, failures, restart, skip, timers, validation) on the engine and the API.
mod cases_d07_cancel_races;
mod cases_d08_mass_cancel;
mod cases_d10_event_dedupe;
mod cases_d11_d12_idempotency;
mod cases_d14_d15_leases;
mod cases_d16_retry_timeouts;
mod cases_d18_catch_up;
mod cases_d19_run_now;
mod cases_d21_ambiguous_commit;
mod cases_d23_values;
mod cases_d25_missing_action;
mod cases_failures;
mod cases_restart;
mod cases_skip;
mod cases_timers;
mod cases_validation;

// The action catalog shared by orchestrators.
mod catalog_shared;

// Crash tests: real `cairn serve` and `cairn worker` processes killed, frozen and restarted; clocks stepped; the
// database made silent.
mod crash_clock_steps;
mod crash_orchestrator;
mod crash_poison_expression;
mod crash_store_silence;
mod crash_timeouts;
mod crash_worker;

// End to end through real worker processes: the rain reminder, literal dollars, step timeouts, HTTP transport
// and the address policy.
mod e2e_c06_literal_dollars;
mod e2e_c11_step_timeout;
mod e2e_http_address_policy;
mod e2e_http_transport;
mod e2e_rain_reminder;

// `notify.send`'s channels against the provider stand-ins (no orchestrator).
mod notify_channels;

// The engine's batching, dispatch and peers.
mod engine_complete_batch;
mod engine_dispatch;
mod engine_peers;
mod engine_submit_batch;

// Metrics, authentication failures, OTLP over gRPC.
mod observability_auth_failures;
mod observability_metrics;
mod observability_otlp_grpc;

// Repairing a run: retrying failed steps, with repaired args.
mod repair_retry;

// Recipients and the delivery ledger.
mod deliveries_ledger;
mod recipients_api;

// The CLI's exit codes and `cairn logs --follow`.
mod cli_exit_codes;

// Signals that stop `cairn serve` and `cairn dev`.
mod shutdown_signals;

// The harness's PostgreSQL template database.
mod template_database;

// The web dashboard in headless chromium: the browser harness and the pages.
mod ui_api;
mod ui_browser;
mod ui_dashboard;

// Durable waiting: approvals, events, schedules, and their API.
mod waiting_api;
mod waiting_approvals;
mod waiting_events;
mod waiting_schedules;

// The PostgreSQL proxy fixtures the store's tests use too.
#[path = "../../../store/tests/store/pg_proxy.rs"]
mod pg_proxy;
