//! Configuration, loaded once in `main`: defaults, then an optional TOML file (`--config FILE`, else
//! `./cairn.toml` when present), then `CAIRN_*` environment variables (`__` nests), then command-line flags.
//! Secrets (the tokens, the database URL's password) have types that never print them in `Debug` output or logs;
//! they are not serialised either (only the defaults are, and those hold no secret).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use cairn_orchestrator::api::ApiConfig;
use cairn_orchestrator::grpc::GrpcLimits;
use cairn_orchestrator::http_server::HttpLimits;
use cairn_orchestrator::secret::{DatabaseUrl, SecretString};
use cairn_workers::actions::address::{AddressPolicy, AllowedHost};
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Deserializer, Serialize};

/// Every setting, with its default.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Database URL: `sqlite:PATH` (default `sqlite:cairn.db`) or `postgres://…`. Not serialised: a missing
    /// value falls back to the default through `#[serde(default)]`.
    #[serde(skip_serializing)]
    pub db: DatabaseUrl,
    /// REST API listen address (default 127.0.0.1:7400).
    pub http: SocketAddr,
    /// Worker protocol listen address (default 127.0.0.1:7401).
    pub grpc: SocketAddr,
    /// REST API URL client commands talk to (`--server`, `CAIRN_SERVER`).
    pub server: Option<String>,
    /// Bearer token of the REST API (`CAIRN_API_TOKEN`); required by `serve`.
    #[serde(skip_serializing)]
    pub api_token: Option<SecretString>,
    /// Token workers present (`CAIRN_WORKER_TOKEN`); required by `serve`.
    #[serde(skip_serializing)]
    pub worker_token: Option<SecretString>,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// Lease lifetime without a heartbeat (liveness timeout), in milliseconds.
    pub lease_ttl_ms: u64,
    /// Largest accepted step output, in bytes.
    pub max_output_bytes: usize,
    /// Most steps in one plan.
    pub max_steps: usize,
    /// Longest CEL expression in a plan (`when`, literal `condition.eval` `expr`, `event.wait` `filter`), in bytes.
    pub max_expression_bytes: usize,
    /// Most `depends_on` entries in one plan, all steps together.
    pub max_edges: usize,
    /// On SIGTERM or ctrl-c, how long requests in flight may take to finish before the process exits, in ms.
    pub shutdown_grace_ms: u64,
    /// PostgreSQL only: how long to wait for a connection or an answer before treating the connection as lost,
    /// in milliseconds (also the `idle_in_transaction_session_timeout` of Cairn's sessions where none is set).
    pub db_answer_deadline_ms: u64,
    /// Whether `http.request` may reach the worker's own host (`127.0.0.0/8`, `::1`, …). Unset: refused by
    /// `cairn worker`, allowed by the in-process worker of `cairn dev` and `cairn run` (see [`LocalDefault`]).
    pub http_allow_loopback: Option<bool>,
    /// Whether `http.request` may reach private networks (`10/8`, `172.16/12`, `192.168/16`, `100.64/10`,
    /// `fc00::/7`). Unset: as `http_allow_loopback`.
    pub http_allow_private: Option<bool>,
    /// Hosts `http.request` may reach even when loopback or private, as `host` or `host:port` (`[v6]:port`);
    /// never link-local or metadata addresses. In the environment: comma-separated.
    #[serde(deserialize_with = "host_list")]
    pub http_allow_hosts: Vec<AllowedHost>,
    /// REST API: longest a client may take to send a request head, in ms; past it the connection is closed.
    pub http_header_read_timeout_ms: u64,
    /// REST API: longest a request body may take to arrive after its head, in ms; past it the answer is 408.
    pub http_body_read_timeout_ms: u64,
    /// REST API: most connections served at once; further ones wait in the listen queue.
    pub max_http_connections: usize,
    /// REST API: most live event streams open at once; the next one is answered 503.
    pub max_sse_subscribers: usize,
    /// Worker protocol: largest message decoded or encoded, in bytes; a larger one fails its call (`OUT_OF_RANGE`).
    pub grpc_max_message_bytes: usize,
    /// Worker protocol: most calls in flight on one connection (HTTP/2 streams); a worker queues the next one.
    pub grpc_max_concurrent_streams: u32,
    /// Worker protocol: most connections at once; further ones wait in the listen queue.
    pub grpc_max_connections: usize,
    /// PostgreSQL: whether completions may take the one-call stored functions (`CAIRN_PG_FAST_PATH`, default
    /// true); `false` sends every batch the general way (the same decisions and rows, more round trips).
    pub pg_fast_path: bool,
}

/// What `http.request` may reach when the settings leave `http_allow_loopback` or `http_allow_private` unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalDefault {
    /// `cairn worker`: a worker may run next to services a plan must not reach.
    Refuse,
    /// The in-process worker of `cairn dev` and `cairn run`: a developer's machine, calling local services.
    Allow,
}

/// `http_allow_hosts`: a list (TOML) or one comma-separated string (the environment), each entry checked.
fn host_list<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<AllowedHost>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Hosts {
        List(Vec<String>),
        Text(String),
    }
    let entries = match Hosts::deserialize(deserializer)? {
        Hosts::List(entries) => entries,
        Hosts::Text(text) => text.split(',').map(str::to_owned).collect(),
    };
    entries
        .iter()
        .filter(|entry| !entry.trim().is_empty())
        .map(|entry| entry.parse().map_err(|e| serde::de::Error::custom(format!("http_allow_hosts: {e}"))))
        .collect()
}

impl Default for Settings {
    fn default() -> Self {
        // The limits' defaults are the orchestrator's, written once there.
        let (api, http, grpc) = (ApiConfig::default(), HttpLimits::default(), GrpcLimits::default());
        Self {
            db: DatabaseUrl::new("sqlite:cairn.db"),
            http: SocketAddr::from(([127, 0, 0, 1], 7400)),
            grpc: SocketAddr::from(([127, 0, 0, 1], 7401)),
            server: None,
            api_token: None,
            worker_token: None,
            max_body_bytes: 8 * 1024 * 1024,
            lease_ttl_ms: 10_000,
            max_output_bytes: 1024 * 1024,
            max_steps: 1000,
            max_expression_bytes: cairn_core::validate::Limits::default().max_expression_bytes,
            max_edges: cairn_core::validate::Limits::default().max_edges,
            shutdown_grace_ms: 10_000,
            db_answer_deadline_ms: u64::try_from(cairn_store::DEFAULT_ANSWER_DEADLINE.as_millis()).unwrap_or(30_000),
            http_allow_loopback: None,
            http_allow_private: None,
            http_allow_hosts: Vec::new(),
            http_header_read_timeout_ms: millis(http.header_read_timeout),
            http_body_read_timeout_ms: millis(api.body_read_timeout),
            max_http_connections: http.max_connections,
            max_sse_subscribers: api.max_sse_subscribers,
            grpc_max_message_bytes: grpc.max_message_bytes,
            grpc_max_concurrent_streams: grpc.max_concurrent_streams,
            grpc_max_connections: grpc.max_connections,
            pg_fast_path: true,
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The settings keys, as environment variables take them (`CAIRN_DB`, `CAIRN_API_TOKEN`, …).
const KEYS: [&str; 25] = [
    "db",
    "http",
    "grpc",
    "server",
    "api_token",
    "worker_token",
    "max_body_bytes",
    "lease_ttl_ms",
    "max_output_bytes",
    "max_steps",
    "max_expression_bytes",
    "max_edges",
    "shutdown_grace_ms",
    "db_answer_deadline_ms",
    "http_allow_loopback",
    "http_allow_private",
    "http_allow_hosts",
    "http_header_read_timeout_ms",
    "http_body_read_timeout_ms",
    "max_http_connections",
    "max_sse_subscribers",
    "grpc_max_message_bytes",
    "grpc_max_concurrent_streams",
    "grpc_max_connections",
    "pg_fast_path",
];

impl Settings {
    /// Loads defaults, the TOML file and the environment.
    ///
    /// # Errors
    /// An unreadable or invalid file, or an environment variable of the wrong type.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Settings> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        match file {
            Some(path) => {
                anyhow::ensure!(path.exists(), "config file {} does not exist", path.display());
                figment = figment.merge(Toml::file(path));
            }
            None => figment = figment.merge(Toml::file("cairn.toml")),
        }
        // Only the keys above: other CAIRN_* variables configure workers and actions.
        figment = figment.merge(Env::prefixed("CAIRN_").only(&KEYS));
        let settings: Settings =
            figment.extract().context("reading configuration (defaults, cairn.toml, CAIRN_* environment)")?;
        settings.check()?;
        Ok(settings)
    }

    /// Refuses limits of 0, which would serve nothing (no connection, no message) or time every client out at
    /// once, and a message limit too small for a step output.
    fn check(&self) -> anyhow::Result<()> {
        let limits = [
            ("http_header_read_timeout_ms", self.http_header_read_timeout_ms),
            ("http_body_read_timeout_ms", self.http_body_read_timeout_ms),
            ("max_http_connections", self.max_http_connections as u64),
            ("grpc_max_message_bytes", self.grpc_max_message_bytes as u64),
            ("grpc_max_concurrent_streams", u64::from(self.grpc_max_concurrent_streams)),
            ("grpc_max_connections", self.grpc_max_connections as u64),
        ];
        for (key, value) in limits {
            anyhow::ensure!(value > 0, "setting `{key}` must be at least 1");
        }
        // A completion carries its step's output in one message; one the orchestrator cannot decode is lost.
        anyhow::ensure!(
            self.grpc_max_message_bytes > self.max_output_bytes,
            "setting `grpc_max_message_bytes` ({}) must exceed `max_output_bytes` ({}): a step output travels in \
             one worker protocol message",
            self.grpc_max_message_bytes,
            self.max_output_bytes
        );
        Ok(())
    }

    /// The REST API's connection limits.
    pub fn http_limits(&self) -> HttpLimits {
        HttpLimits {
            header_read_timeout: Duration::from_millis(self.http_header_read_timeout_ms),
            max_connections: self.max_http_connections,
        }
    }

    /// The worker protocol's limits.
    pub fn grpc_limits(&self) -> GrpcLimits {
        GrpcLimits {
            max_message_bytes: self.grpc_max_message_bytes,
            max_concurrent_streams: self.grpc_max_concurrent_streams,
            max_connections: self.grpc_max_connections,
        }
    }

    /// The destinations `http.request` may reach, for a worker whose unset allowances default to `default`.
    pub fn address_policy(&self, default: LocalDefault) -> AddressPolicy {
        let allow = default == LocalDefault::Allow;
        AddressPolicy {
            allow_loopback: self.http_allow_loopback.unwrap_or(allow),
            allow_private: self.http_allow_private.unwrap_or(allow),
            allow_hosts: self.http_allow_hosts.clone(),
        }
    }

    /// Engine settings derived from these.
    pub fn engine(&self) -> cairn_orchestrator::EngineConfig {
        let lease_ttl = Duration::from_millis(self.lease_ttl_ms);
        cairn_orchestrator::EngineConfig {
            lease_ttl,
            startup_grace: lease_ttl,
            max_output_bytes: self.max_output_bytes,
            limits: cairn_core::validate::Limits {
                max_steps: self.max_steps,
                max_expression_bytes: self.max_expression_bytes,
                max_edges: self.max_edges,
                ..Default::default()
            },
            pg_fast_path: self.pg_fast_path,
            ..Default::default()
        }
    }
}

#[cfg(test)]
// `figment::Jail` fixes the closures' error type (`figment::Error`, large).
#[allow(clippy::result_large_err)]
mod tests {
    use cairn_orchestrator::secret::ExposeSecret;

    use super::*;

    /// `figment::Jail` runs each closure in a scratch working directory with its own environment, one at a time.
    fn load_in_jail(check: impl FnOnce(&mut figment::Jail) -> figment::error::Result<()>) {
        figment::Jail::expect_with(check);
    }

    #[test]
    fn a_worker_refuses_local_addresses_and_dev_allows_them_unless_the_settings_say() {
        load_in_jail(|_| {
            let settings = Settings::load(None).expect("defaults load");
            let worker = settings.address_policy(LocalDefault::Refuse);
            assert!(!worker.allow_loopback && !worker.allow_private, "cairn worker refuses by default: {worker:?}");
            let dev = settings.address_policy(LocalDefault::Allow);
            assert!(dev.allow_loopback && dev.allow_private, "cairn dev allows by default: {dev:?}");
            Ok(())
        });
        load_in_jail(|jail| {
            jail.create_file("cairn.toml", "http_allow_private = true\nhttp_allow_loopback = false\n")?;
            let settings = Settings::load(None).expect("the file loads");
            let worker = settings.address_policy(LocalDefault::Refuse);
            assert!(worker.allow_private && !worker.allow_loopback, "the file decides: {worker:?}");
            let dev = settings.address_policy(LocalDefault::Allow);
            assert!(!dev.allow_loopback, "an explicit `false` holds for cairn dev too: {dev:?}");
            Ok(())
        });
    }

    #[test]
    fn the_environment_sets_the_allowances_and_a_comma_separated_host_list() {
        load_in_jail(|jail| {
            jail.create_file("cairn.toml", "http_allow_hosts = [\"ignored.example:1\"]\n")?;
            jail.set_env("CAIRN_HTTP_ALLOW_LOOPBACK", "true");
            jail.set_env("CAIRN_HTTP_ALLOW_HOSTS", "127.0.0.1:8080, svc.internal ,[::1]:9000");
            let policy = Settings::load(None).expect("the environment loads").address_policy(LocalDefault::Refuse);
            assert!(policy.allow_loopback && !policy.allow_private, "{policy:?}");
            let hosts: Vec<String> = policy.allow_hosts.iter().map(ToString::to_string).collect();
            assert_eq!(hosts, ["127.0.0.1:8080", "svc.internal", "[::1]:9000"], "the environment wins over the file");
            Ok(())
        });
    }

    #[test]
    fn a_malformed_allowed_host_is_refused_at_load_naming_the_setting() {
        load_in_jail(|jail| {
            jail.set_env("CAIRN_HTTP_ALLOW_HOSTS", "svc.internal:notaport");
            let error = Settings::load(None).expect_err("a bad entry");
            let text = format!("{error:#}");
            assert!(text.contains("http_allow_hosts") && text.contains("svc.internal:notaport"), "{text}");
            Ok(())
        });
    }

    /// Loads `toml` as `cairn.toml` in a jail (scratch directory and environment, one jail at a time, so the
    /// other tests' environment variables never leak in).
    fn load(_test: &str, toml: &str) -> anyhow::Result<Settings> {
        let mut loaded = None;
        load_in_jail(|jail| {
            jail.create_file("cairn.toml", toml)?;
            loaded = Some(Settings::load(None));
            Ok(())
        });
        loaded.expect("the jail ran")
    }

    #[test]
    fn the_database_password_and_the_tokens_never_appear_in_debug_output() {
        load_in_jail(|jail| {
            jail.set_env("CAIRN_DB", "postgres://cairn:db-pw-9a41@db.internal:5432/cairn");
            jail.set_env("CAIRN_API_TOKEN", "api-token-60c2");
            jail.set_env("CAIRN_WORKER_TOKEN", "worker-token-e17d");
            let settings = Settings::load(None).expect("the environment loads");

            let printed = format!("{settings:?}");

            for secret in ["db-pw-9a41", "api-token-60c2", "worker-token-e17d"] {
                assert!(!printed.contains(secret), "`{secret}` is printed: {printed}");
            }
            assert!(printed.contains("postgres://cairn:***@db.internal:5432/cairn"), "which database: {printed}");
            assert_eq!(settings.api_token.as_ref().map(ExposeSecret::expose_secret), Some("api-token-60c2"));
            Ok(())
        });
    }

    #[test]
    fn the_postgresql_fast_path_is_on_unless_the_environment_turns_it_off() {
        load_in_jail(|jail| {
            assert!(Settings::load(None).expect("defaults load").engine().pg_fast_path, "on by default");
            jail.set_env("CAIRN_PG_FAST_PATH", "false");
            assert!(!Settings::load(None).expect("the environment loads").engine().pg_fast_path, "turned off");
            Ok(())
        });
    }

    #[test]
    fn the_database_defaults_to_the_local_sqlite_file() {
        load_in_jail(|_| {
            let settings = Settings::load(None).expect("defaults load");
            assert_eq!(settings.db.expose_secret(), "sqlite:cairn.db", "unserialised, yet defaulted");
            assert!(settings.api_token.is_none() && settings.worker_token.is_none());
            Ok(())
        });
    }

    #[test]
    fn abuse_limits_are_read_from_the_file_into_typed_limits() {
        let toml = "http_header_read_timeout_ms = 250\nmax_http_connections = 3\ngrpc_max_message_bytes = 2097152\n\
                    grpc_max_concurrent_streams = 8\ngrpc_max_connections = 5\n";

        let settings = load("limits", toml).expect("valid settings");

        let http = settings.http_limits();
        assert_eq!(http.header_read_timeout, Duration::from_millis(250), "milliseconds become a Duration");
        assert_eq!(http.max_connections, 3);
        let grpc = settings.grpc_limits();
        assert_eq!((grpc.max_message_bytes, grpc.max_concurrent_streams, grpc.max_connections), (2_097_152, 8, 5));
    }

    #[test]
    fn a_limit_of_zero_or_a_message_limit_below_the_output_limit_is_refused() {
        let zero = load("zero", "max_http_connections = 0\n").expect_err("0 connections would serve nothing");
        assert!(zero.to_string().contains("max_http_connections"), "the error names the key: {zero}");

        let small = load("small", "grpc_max_message_bytes = 1000\n").expect_err("an output would not fit");
        assert!(small.to_string().contains("grpc_max_message_bytes"), "the error names the key: {small}");
    }
}
