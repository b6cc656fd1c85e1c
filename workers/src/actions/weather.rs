//! `weather.forecast`: the daily forecast for a city and a date, from Open-Meteo (no API key). The city is
//! geocoded (`/v1/search`), then the forecast is read for exactly that day (`/v1/forecast`).

use cairn_core::catalog::Effect;
use cairn_core::failure::codes;
use jiff::Timestamp;
use jiff::civil::Date;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::transport::{self, Client};
use crate::action::{Action, ActionError};
use crate::context::ActionContext;

/// Largest Open-Meteo response read, in bytes.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Daily variables requested from the forecast API.
const DAILY: &str = "precipitation_probability_max,temperature_2m_max,temperature_2m_min,weather_code";

/// Configuration of `weather.forecast`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct WeatherConfig {
    /// Geocoding API base, without `/v1/search`. Default `https://geocoding-api.open-meteo.com`.
    pub geocoding_base_url: String,
    /// Forecast API base, without `/v1/forecast`. Default `https://api.open-meteo.com`.
    pub forecast_base_url: String,
    /// The instant `today` and `tomorrow` are resolved from; `None` is the system clock. Tests and
    /// reproducible demos set it.
    #[serde(skip)]
    pub now: Option<Timestamp>,
}

impl Default for WeatherConfig {
    fn default() -> Self {
        Self {
            geocoding_base_url: "https://geocoding-api.open-meteo.com".into(),
            forecast_base_url: "https://api.open-meteo.com".into(),
            now: None,
        }
    }
}

/// Args of `weather.forecast` (field names match the catalog schema).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WeatherArgs {
    /// City name, e.g. `Wuhan`.
    #[schemars(length(min = 1))]
    pub city: String,
    /// `today`, `tomorrow` (both in the city's time zone) or `YYYY-MM-DD`; default `tomorrow`.
    pub date: Option<String>,
    /// Latitude in degrees; with `longitude`, used instead of the geocoded position.
    pub latitude: Option<f64>,
    /// Longitude in degrees; with `latitude`, used instead of the geocoded position.
    pub longitude: Option<f64>,
}

/// Output of `weather.forecast`. A value Open-Meteo has no data for is `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WeatherOutput {
    /// City name as geocoded (the given name when coordinates were given and no lookup was needed).
    pub city: String,
    /// The forecast day, `YYYY-MM-DD`.
    pub date: String,
    /// Highest precipitation probability of the day, in percent (0–100).
    pub precipitation_probability: Option<f64>,
    /// Maximum temperature at 2 m, °C.
    pub temperature_max: Option<f64>,
    /// Minimum temperature at 2 m, °C.
    pub temperature_min: Option<f64>,
    /// Text for the WMO weather code, e.g. `slight rain`.
    pub conditions: String,
    /// WMO weather code (0–99).
    pub weather_code: Option<u16>,
    /// IANA time zone of the city, when known.
    pub timezone: Option<String>,
}

/// A day as the args name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Day {
    Today,
    Tomorrow,
    On(Date),
}

impl Day {
    fn parse(text: Option<&str>) -> Result<Self, ActionError> {
        let text = text.map_or("tomorrow", str::trim);
        match text.to_ascii_lowercase().as_str() {
            "today" => Ok(Self::Today),
            "tomorrow" => Ok(Self::Tomorrow),
            _ => text.parse::<Date>().map(Self::On).map_err(|e| {
                let message = format!("date `{text}` is not today, tomorrow or YYYY-MM-DD: {e}");
                ActionError::permanent(codes::INVALID_ARGS, message).did_not_take_effect()
            }),
        }
    }

    /// The calendar date in `timezone` (UTC when unknown) at `now`.
    fn resolve(self, now: Timestamp, timezone: Option<&str>) -> Result<Date, ActionError> {
        let today = timezone
            .and_then(|tz| now.in_tz(tz).ok())
            .map_or_else(|| now.to_zoned_datetime(jiff::tz::TimeZone::UTC).date(), |zoned| zoned.date());
        match self {
            Self::Today => Ok(today),
            Self::Tomorrow => today
                .tomorrow()
                .map_err(|e| ActionError::permanent(codes::INVALID_ARGS, format!("no day after {today}: {e}"))),
            Self::On(date) => Ok(date),
        }
    }
}

/// One geocoding result (`/v1/search`).
#[derive(Debug, Deserialize)]
struct Place {
    name: String,
    latitude: f64,
    longitude: f64,
    timezone: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SearchResponse {
    #[serde(default)]
    results: Vec<Place>,
}

#[derive(Debug, Deserialize)]
struct ForecastResponse {
    daily: Daily,
    timezone: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Daily {
    time: Vec<String>,
    #[serde(default)]
    precipitation_probability_max: Vec<Option<f64>>,
    #[serde(default)]
    temperature_2m_max: Vec<Option<f64>>,
    #[serde(default)]
    temperature_2m_min: Vec<Option<f64>>,
    #[serde(default)]
    weather_code: Vec<Option<f64>>,
}

/// Open-Meteo's error body (`400 {"error": true, "reason": "…"}`).
#[derive(Debug, Deserialize)]
struct ApiError {
    reason: String,
}

/// `weather.forecast` {city, date?, latitude?, longitude?} → [`WeatherOutput`].
///
/// With both coordinates and an explicit date no geocoding happens; otherwise the city is geocoded (first
/// result) for its position and time zone. Errors: unknown city → permanent `not_found`; a bad date or an
/// Open-Meteo `400` (e.g. a date outside the forecast range) → permanent `invalid_args`; a day missing from the
/// response → permanent `not_found`; 5xx, 429 and connection failures → retryable (see `transport`: nothing sent
/// is `did_not_take_effect`, a connection lost after the request is `transport_error`); cancellation →
/// `cancelled`.
#[derive(Debug)]
pub struct WeatherForecast {
    config: WeatherConfig,
    client: Client,
}

impl WeatherForecast {
    /// A `weather.forecast` reading from `config`'s endpoints.
    pub fn new(config: WeatherConfig) -> Self {
        Self { config, client: Client::standard() }
    }

    async fn get_json<T: DeserializeOwned>(
        &self,
        ctx: &ActionContext,
        url: String,
        query: &[(&str, String)],
    ) -> Result<T, ActionError> {
        const WHAT: &str = "weather.forecast";
        let request = self.client.get()?.get(url).query(query).timeout(ctx.remaining());
        let response = transport::send(ctx, WHAT, request).await?;
        let (status, headers) = (response.status(), response.headers().clone());
        if !status.is_success() {
            let text = transport::race(ctx, transport::error_text(response)).await?;
            if status.as_u16() == 400
                && let Ok(api) = serde_json::from_str::<ApiError>(&text)
            {
                let message = format!("{WHAT}: Open-Meteo refused the request: {}", api.reason);
                return Err(ActionError::permanent(codes::INVALID_ARGS, message).did_not_take_effect());
            }
            return Err(transport::status_error(WHAT, status, &headers, &text));
        }
        let bytes = transport::race(ctx, transport::read_body(WHAT, response, MAX_RESPONSE_BYTES)).await??;
        serde_json::from_slice(&bytes).map_err(|e| {
            ActionError::permanent(codes::ACTION_ERROR, format!("{WHAT}: unexpected Open-Meteo response: {e}"))
        })
    }

    async fn geocode(&self, ctx: &ActionContext, city: &str) -> Result<Place, ActionError> {
        let url = format!("{}/v1/search", self.config.geocoding_base_url.trim_end_matches('/'));
        let query = [("name", city.to_owned()), ("count", "1".to_owned())];
        let found: SearchResponse = self.get_json(ctx, url, &query).await?;
        found
            .results
            .into_iter()
            .next()
            .ok_or_else(|| ActionError::permanent(codes::NOT_FOUND, format!("no city named `{city}` was found")))
    }
}

impl Action for WeatherForecast {
    type Args = WeatherArgs;
    type Output = WeatherOutput;
    const NAME: &'static str = "weather.forecast";
    const DESCRIPTION: &'static str =
        "Daily forecast for a city and date: precipitation probability (%), temperatures (°C) and conditions.";
    const EFFECT: Effect = Effect::Read;

    fn grounded_args(&self) -> Vec<String> {
        vec!["/city".into()]
    }

    async fn run(&self, args: WeatherArgs, ctx: &ActionContext) -> Result<WeatherOutput, ActionError> {
        let day = Day::parse(args.date.as_deref())?;
        let coordinates = match (args.latitude, args.longitude) {
            (Some(lat), Some(lon)) => Some((lat, lon)),
            (None, None) => None,
            _ => {
                let message = "latitude and longitude must be given together";
                return Err(ActionError::permanent(codes::INVALID_ARGS, message).did_not_take_effect());
            }
        };
        let place = match (coordinates, day) {
            (Some((latitude, longitude)), Day::On(_)) => {
                Place { name: args.city.clone(), latitude, longitude, timezone: None }
            }
            (Some((latitude, longitude)), _) => Place { latitude, longitude, ..self.geocode(ctx, &args.city).await? },
            (None, _) => self.geocode(ctx, &args.city).await?,
        };
        let date = day.resolve(self.config.now.unwrap_or_else(Timestamp::now), place.timezone.as_deref())?;
        let url = format!("{}/v1/forecast", self.config.forecast_base_url.trim_end_matches('/'));
        let query = [
            ("latitude", place.latitude.to_string()),
            ("longitude", place.longitude.to_string()),
            ("daily", DAILY.to_owned()),
            ("timezone", "auto".to_owned()),
            ("start_date", date.to_string()),
            ("end_date", date.to_string()),
        ];
        let forecast: ForecastResponse = self.get_json(ctx, url, &query).await?;
        let wanted = date.to_string();
        let Some(i) = forecast.daily.time.iter().position(|d| *d == wanted) else {
            let message = format!("the forecast has no entry for {wanted}");
            return Err(ActionError::permanent(codes::NOT_FOUND, message));
        };
        let at = |values: &[Option<f64>]| values.get(i).copied().flatten();
        let weather_code = at(&forecast.daily.weather_code).and_then(|c| u16::try_from(c as i64).ok());
        Ok(WeatherOutput {
            city: place.name,
            date: wanted,
            precipitation_probability: at(&forecast.daily.precipitation_probability_max),
            temperature_max: at(&forecast.daily.temperature_2m_max),
            temperature_min: at(&forecast.daily.temperature_2m_min),
            conditions: weather_code.map_or("unknown", describe).to_owned(),
            weather_code,
            timezone: place.timezone.or(forecast.timezone),
        })
    }
}

/// Text for a WMO weather interpretation code (as used by Open-Meteo).
pub fn describe(code: u16) -> &'static str {
    match code {
        0 => "clear sky",
        1 => "mainly clear",
        2 => "partly cloudy",
        3 => "overcast",
        45 => "fog",
        48 => "depositing rime fog",
        51 => "light drizzle",
        53 => "moderate drizzle",
        55 => "dense drizzle",
        56 => "light freezing drizzle",
        57 => "dense freezing drizzle",
        61 => "slight rain",
        63 => "moderate rain",
        65 => "heavy rain",
        66 => "light freezing rain",
        67 => "heavy freezing rain",
        71 => "slight snow fall",
        73 => "moderate snow fall",
        75 => "heavy snow fall",
        77 => "snow grains",
        80 => "slight rain showers",
        81 => "moderate rain showers",
        82 => "violent rain showers",
        85 => "slight snow showers",
        86 => "heavy snow showers",
        95 => "thunderstorm",
        96 => "thunderstorm with slight hail",
        99 => "thunderstorm with heavy hail",
        _ => "unknown",
    }
}
