//! `weather.forecast` against a local server speaking Open-Meteo's recorded response shapes: date resolution in
//! the city's time zone with an injected "now", parsing, and failure classification.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use cairn_workers::action::Action;
use cairn_workers::actions::weather::{WeatherArgs, WeatherConfig, WeatherForecast};
use serde_json::{Value, json};

/// Recorded from `GET /v1/search?name=Wuhan&count=1` (trimmed to the fields that matter).
const GEOCODE_WUHAN: &str = r#"{"results":[{"id":1791247,"name":"Wuhan","latitude":30.58333,"longitude":114.26667,
  "elevation":37.0,"feature_code":"PPLA","country_code":"CN","timezone":"Asia/Shanghai","population":9785388,
  "country":"China","admin1":"Hubei"}],"generationtime_ms":0.51}"#;

/// Recorded shape of `GET /v1/forecast?...&daily=...&start_date=D&end_date=D`; `{date}` is replaced.
const FORECAST: &str = r#"{"latitude":30.5,"longitude":114.25,"generationtime_ms":0.06,"utc_offset_seconds":28800,
  "timezone":"Asia/Shanghai","timezone_abbreviation":"GMT+8","elevation":37.0,
  "daily_units":{"time":"iso8601","precipitation_probability_max":"%","temperature_2m_max":"°C",
  "temperature_2m_min":"°C","weather_code":"wmo code"},
  "daily":{"time":["{date}"],"precipitation_probability_max":[80],"temperature_2m_max":[12.5],
  "temperature_2m_min":[6.1],"weather_code":[61]}}"#;

#[derive(Default)]
struct Calls {
    geocode: AtomicUsize,
    forecast: AtomicUsize,
    fail_forecast: bool,
}

async fn search(State(calls): State<Arc<Calls>>, Query(q): Query<HashMap<String, String>>) -> Response {
    calls.geocode.fetch_add(1, Ordering::SeqCst);
    assert_eq!(q.get("count").map(String::as_str), Some("1"), "one result is enough");
    match q.get("name").map(String::as_str) {
        Some("Wuhan") => ([("content-type", "application/json")], GEOCODE_WUHAN).into_response(),
        _ => Json(json!({"generationtime_ms": 0.3})).into_response(),
    }
}

async fn forecast(State(calls): State<Arc<Calls>>, Query(q): Query<HashMap<String, String>>) -> Response {
    calls.forecast.fetch_add(1, Ordering::SeqCst);
    if calls.fail_forecast {
        return (StatusCode::BAD_GATEWAY, "upstream down").into_response();
    }
    let (start, end) = (q["start_date"].clone(), q["end_date"].clone());
    assert_eq!(start, end, "exactly one day is requested");
    assert_eq!(q["daily"], "precipitation_probability_max,temperature_2m_max,temperature_2m_min,weather_code");
    assert_eq!(q["timezone"], "auto");
    if start.starts_with("1999") {
        let reason = "Parameter 'start_date' is out of allowed range";
        return (StatusCode::BAD_REQUEST, Json(json!({"error": true, "reason": reason}))).into_response();
    }
    ([("content-type", "application/json")], FORECAST.replace("{date}", &start)).into_response()
}

async fn open_meteo(fail_forecast: bool) -> (String, Arc<Calls>) {
    let calls = Arc::new(Calls { fail_forecast, ..Calls::default() });
    let router = axum::Router::new()
        .route("/v1/search", get(search))
        .route("/v1/forecast", get(forecast))
        .with_state(Arc::clone(&calls));
    (format!("http://{}", support::serve(router).await), calls)
}

/// 2027-03-14 17:00 UTC is already 2027-03-15 01:00 in Wuhan (UTC+8).
fn action(base: &str) -> WeatherForecast {
    let now = "2027-03-14T17:00:00Z".parse().expect("timestamp");
    WeatherForecast::new(WeatherConfig {
        geocoding_base_url: base.to_owned(),
        forecast_base_url: base.to_owned(),
        now: Some(now),
    })
}

fn args(value: Value) -> WeatherArgs {
    serde_json::from_value(value).expect("args fit the schema")
}

#[tokio::test]
async fn tomorrow_is_resolved_in_the_citys_time_zone_and_the_forecast_is_parsed() {
    let (base, _) = open_meteo(false).await;
    let out = action(&base).run(args(json!({"city": "Wuhan"})), &support::ctx("weather")).await.expect("forecast");
    assert_eq!(out.date, "2027-03-16", "default is tomorrow in Asia/Shanghai, not in UTC");
    assert_eq!(out.city, "Wuhan");
    assert_eq!(out.precipitation_probability, Some(80.0));
    assert_eq!(out.temperature_max, Some(12.5));
    assert_eq!(out.temperature_min, Some(6.1));
    assert_eq!(out.weather_code, Some(61));
    assert_eq!(out.conditions, "slight rain");
    assert_eq!(out.timezone.as_deref(), Some("Asia/Shanghai"));
}

#[tokio::test]
async fn today_and_explicit_dates_resolve_as_written() {
    let (base, _) = open_meteo(false).await;
    let weather = action(&base);
    let today = weather.run(args(json!({"city": "Wuhan", "date": "today"})), &support::ctx("w")).await.expect("ok");
    assert_eq!(today.date, "2027-03-15", "01:00 local on the 15th is today in Wuhan");
    let fixed = weather.run(args(json!({"city": "Wuhan", "date": "2027-03-20"})), &support::ctx("w")).await;
    assert_eq!(fixed.expect("ok").date, "2027-03-20");
}

#[tokio::test]
async fn coordinates_with_an_explicit_date_skip_geocoding() {
    let (base, calls) = open_meteo(false).await;
    let value = json!({"city": "Somewhere", "date": "2027-03-20", "latitude": 30.5, "longitude": 114.2});
    let out = action(&base).run(args(value), &support::ctx("w")).await.expect("ok");
    assert_eq!(out.city, "Somewhere");
    assert_eq!(calls.geocode.load(Ordering::SeqCst), 0, "no lookup is needed");
    assert_eq!(calls.forecast.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_unknown_city_is_a_permanent_not_found() {
    let (base, calls) = open_meteo(false).await;
    let err = action(&base).run(args(json!({"city": "Atlantis"})), &support::ctx("w")).await.expect_err("no city");
    assert_eq!(err.code, "not_found");
    assert!(!err.retryable, "retrying will not create the city");
    assert_eq!(calls.forecast.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn server_errors_are_retryable_and_bad_dates_are_not() {
    let (base, _) = open_meteo(true).await;
    let err = action(&base).run(args(json!({"city": "Wuhan"})), &support::ctx("w")).await.expect_err("502");
    assert!(err.retryable && err.code == "action_error", "5xx is retryable: {err:?}");

    let (base, _) = open_meteo(false).await;
    let weather = action(&base);
    let err = weather.run(args(json!({"city": "Wuhan", "date": "1999-01-01"})), &support::ctx("w")).await;
    let err = err.expect_err("out of range");
    assert_eq!(err.code, "invalid_args", "Open-Meteo's 400 reason is reported: {err:?}");
    assert!(err.message.contains("out of allowed range"));
    let err = weather.run(args(json!({"city": "Wuhan", "date": "next week"})), &support::ctx("w")).await;
    assert_eq!(err.expect_err("unparseable").code, "invalid_args");
}

#[tokio::test]
async fn a_connection_lost_after_the_request_is_ambiguous_and_a_refused_one_sent_nothing() {
    let (addr, requests) = support::raw_server(support::RawAnswer::Reset).await;
    let err = action(&format!("http://{addr}")).run(args(json!({"city": "Wuhan"})), &support::ctx("w")).await;
    let err = err.expect_err("no answer");
    assert_eq!(err.code, "transport_error", "{err:?}");
    assert!(err.retryable && !err.did_not_take_effect, "the server read the request: {err:?}");
    assert_eq!(requests.load(Ordering::SeqCst), 1);

    let closed = format!("http://127.0.0.1:{}", support::closed_port());
    let err = action(&closed).run(args(json!({"city": "Wuhan"})), &support::ctx("w")).await.expect_err("refused");
    assert!(err.retryable && err.did_not_take_effect && err.code == "action_error", "nothing was sent: {err:?}");
}
