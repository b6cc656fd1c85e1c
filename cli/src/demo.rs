//! `--demo`: a local stand-in for the Open-Meteo geocoding and forecast APIs, so the rain reminder runs offline
//! on a fresh machine. Every city is found (at Wuhan's coordinates, in the Asia/Shanghai zone) and every day
//! forecasts rain: 80 % precipitation probability, 12.5 °C / 6.1 °C, WMO code 61 (slight rain).

use std::net::SocketAddr;

use axum::Json;
use axum::Router;
use axum::extract::Query;
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Search {
    name: String,
}

#[derive(Deserialize)]
struct Forecast {
    start_date: Option<String>,
}

async fn search(Query(q): Query<Search>) -> Json<Value> {
    Json(json!({"results": [{"name": q.name, "latitude": 30.5928, "longitude": 114.3055,
        "timezone": "Asia/Shanghai", "country": "China"}]}))
}

async fn forecast(Query(q): Query<Forecast>) -> Json<Value> {
    let day = q.start_date.unwrap_or_else(|| "2027-03-15".into());
    Json(json!({"daily": {"time": [day], "precipitation_probability_max": [80],
        "temperature_2m_max": [12.5], "temperature_2m_min": [6.1], "weather_code": [61]}}))
}

/// Serves the fixture on 127.0.0.1 (a free port); returns its base URL.
///
/// # Errors
/// The port cannot be bound.
pub async fn start() -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    let app = Router::new().route("/v1/search", get(search)).route("/v1/forecast", get(forecast));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "demo weather fixture stopped");
        }
    });
    Ok(format!("http://{addr}"))
}
