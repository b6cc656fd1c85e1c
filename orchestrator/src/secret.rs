//! Secrets in configuration: tokens are [`SecretString`]s, which `Debug` prints as `[REDACTED]`, and the database
//! URL is a [`DatabaseUrl`], which prints with its password replaced, so an operator still sees which database a
//! process uses. Reading the value takes an explicit [`ExposeSecret::expose_secret`], at the few places that
//! hand it to a connection or compare it with a request's.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

pub use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer};

/// What stands in for a password in printed URLs.
const MASK: &str = "***";

/// A database URL (`sqlite:PATH`, `postgres://user:password@host/db`). `Debug` and `Display` show it with the
/// password masked (`postgres://user:***@host/db`, `?password=***`); [`ExposeSecret::expose_secret`] gives the
/// URL to connect with.
#[derive(Clone)]
pub struct DatabaseUrl(SecretString);

impl DatabaseUrl {
    /// Wraps `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self(SecretString::from(url.into()))
    }

    /// The URL with its password masked, for messages and logs.
    pub fn redacted(&self) -> String {
        redact(self.0.expose_secret())
    }

    /// Whether this names a PostgreSQL database (`postgres://` or `postgresql://`).
    pub fn is_postgres(&self) -> bool {
        self.0.expose_secret().starts_with("postgres")
    }
}

impl ExposeSecret<str> for DatabaseUrl {
    fn expose_secret(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DatabaseUrl").field(&self.redacted()).finish()
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl From<String> for DatabaseUrl {
    fn from(url: String) -> Self {
        Self::new(url)
    }
}

impl From<&str> for DatabaseUrl {
    fn from(url: &str) -> Self {
        Self::new(url)
    }
}

/// For command-line flags (`--db`): any text is a URL here; the store says whether it can open it.
impl FromStr for DatabaseUrl {
    type Err = Infallible;

    fn from_str(url: &str) -> Result<Self, Infallible> {
        Ok(Self::new(url))
    }
}

impl<'de> Deserialize<'de> for DatabaseUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

/// `url` with the password of its user info and any `password` query parameter masked. The user info ends at
/// the last `@`, so a password with an unencoded `@` is masked whole; the query is looked for only after it.
fn redact(url: &str) -> String {
    let (mut out, rest) = match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => match url[scheme + 3..at].split_once(':') {
            Some((user, _)) => (format!("{}://{user}:{MASK}@", &url[..scheme]), &url[at + 1..]),
            None => (url[..=at].to_owned(), &url[at + 1..]),
        },
        _ => (String::new(), url),
    };
    let Some((location, query)) = rest.split_once('?') else {
        out.push_str(rest);
        return out;
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}={MASK}"),
            _ => pair.to_owned(),
        })
        .collect();
    out.push_str(location);
    out.push('?');
    out.push_str(&pairs.join("&"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_url_prints_with_its_password_masked_and_connects_with_it() {
        let url = DatabaseUrl::new("postgres://cairn:s3cr3t-pw@db.internal:5432/cairn?sslmode=require");

        for printed in [format!("{url:?}"), url.to_string()] {
            assert!(!printed.contains("s3cr3t-pw"), "no password: {printed}");
            assert!(printed.contains("postgres://cairn:***@db.internal:5432/cairn?sslmode=require"), "{printed}");
        }
        assert_eq!(url.expose_secret(), "postgres://cairn:s3cr3t-pw@db.internal:5432/cairn?sslmode=require");
        assert!(url.is_postgres());
    }

    #[test]
    fn a_password_given_as_a_query_parameter_is_masked_too() {
        let url = DatabaseUrl::new("postgresql://db.internal/cairn?sslmode=disable&Password=hunter2");

        assert_eq!(url.redacted(), "postgresql://db.internal/cairn?sslmode=disable&Password=***");
    }

    #[test]
    fn a_password_with_unencoded_delimiters_is_masked_whole() {
        let url = DatabaseUrl::new("postgres://cairn:p@ss?w&rd@db.internal/cairn");

        assert_eq!(url.redacted(), "postgres://cairn:***@db.internal/cairn");
    }

    #[test]
    fn urls_without_a_password_print_unchanged() {
        for url in ["sqlite:cairn.db", "sqlite::memory:", "postgres://postgres@127.0.0.1:5432/postgres"] {
            assert_eq!(DatabaseUrl::new(url).redacted(), url);
        }
        assert!(!DatabaseUrl::new("sqlite:cairn.db").is_postgres());
    }
}
