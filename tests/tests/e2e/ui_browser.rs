//! The browser the dashboard tests drive: Debian's `chromium`, headless, through its `chromedriver` on a free
//! port, with the fantoccini WebDriver client. Each [`Browser`] has its own chromedriver (in its own process
//! group) and a fresh profile directory; dropping it, pass or fail, kills the group (chromedriver and every
//! chromium process it started) and removes the profile. [`Dashboard`] is a logged-in page on a real `cairn
//! serve`, with the waits and reads the tests share.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cairn_tests::http::{TempDir, within_or};
use cairn_tests::process::{Orchestrator, free_port};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// How long the page may take to show something.
pub const PAGE_LIMIT: Duration = Duration::from_secs(30);

/// Chromium's flags for running as root in a container: no sandbox (it needs user namespaces), no GPU, and
/// nothing that reaches the network on its own.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
];

/// Headless chromium makes no window narrower than this; narrower viewports are emulated.
const MIN_WINDOW_WIDTH: u32 = 500;

/// A headless chromium under its own chromedriver.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    _profile: TempDir,
}

impl Browser {
    /// Starts chromedriver and a chromium window `width` × `height` CSS pixels.
    pub async fn start(width: u32, height: u32) -> Browser {
        let profile = TempDir::new();
        let port = free_port();
        let mut command = Command::new("chromedriver");
        command.arg(format!("--port={port}")).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        // Its own process group, so that dropping the browser can kill chromium's processes too.
        command.process_group(0);
        let driver = command.spawn().expect("chromedriver runs (apt-get install chromium chromium-driver)");
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        within_or(
            PAGE_LIMIT,
            || {
                let (http, status) = (http.clone(), format!("{url}/status"));
                async move { http.get(status).send().await.ok().filter(|a| a.status().is_success()).map(drop) }
            },
            || "waiting until chromedriver answers".to_owned(),
        )
        .await;
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|f| (*f).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.push(format!("--window-size={},{height}", width.max(MIN_WINDOW_WIDTH)));
        let mut options = json!({"binary": "/usr/bin/chromium", "args": args});
        if width < MIN_WINDOW_WIDTH {
            // A phone: the page gets a viewport of exactly `width` CSS pixels.
            options["mobileEmulation"] = json!({"deviceMetrics": {"width": width, "height": height, "pixelRatio": 1}});
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".into(), json!("chrome"));
        capabilities.insert("goog:chromeOptions".into(), json!(options));
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&url)
            .await
            .expect("a chromium session through chromedriver");
        Browser { client, driver, _profile: profile }
    }

    /// Ends the session (chromium quits), then the driver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: chromedriver and the chromium processes it started, even when the test panicked
        // before `close`.
        // `--` before the negative id: without it, `kill` reads `-PID` as an option.
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-s", "KILL", "--", &group]).status();
        let _ = self.driver.wait();
    }
}

/// Where the tests put their screenshots: `target/ui-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ui-screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshot directory");
    dir
}

/// A browser logged in to the dashboard of `orchestrator`.
pub struct Dashboard {
    /// The browser.
    pub browser: Browser,
    /// `http://127.0.0.1:PORT` of the orchestrator.
    pub base_url: String,
}

impl Dashboard {
    /// Opens the dashboard of `orchestrator` in a `width` × `height` window and logs in with its API token
    /// through the login form.
    pub async fn open(orchestrator: &Orchestrator, width: u32, height: u32) -> Dashboard {
        let browser = Browser::start(width, height).await;
        let dashboard = Dashboard { browser, base_url: orchestrator.base_url.clone() };
        dashboard.log_in(orchestrator.api_token()).await;
        dashboard
    }

    /// Logs in through the form at `/ui/login` and waits for the run list.
    pub async fn log_in(&self, token: &str) {
        self.goto("/ui").await;
        self.wait_for("#token").await.send_keys(token).await.expect("the token is typed");
        self.click("#login-submit").await;
        self.wait_for("#filters").await;
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.browser.client
    }

    /// Goes to `path` of the orchestrator.
    pub async fn goto(&self, path: &str) {
        self.client().goto(&format!("{}{path}", self.base_url)).await.expect("the page loads");
    }

    /// Waits until an element matches `css` and returns it.
    pub async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        let client = self.client().clone();
        within_or(
            PAGE_LIMIT,
            || {
                let client = client.clone();
                async move { client.find(Locator::Css(css)).await.ok() }
            },
            || format!("waiting for `{css}` on the page"),
        )
        .await
    }

    /// Waits until the script `condition` (a JavaScript expression) is true.
    pub async fn wait_until(&self, what: &str, condition: &str) {
        let script = format!("return Boolean({condition});");
        let client = self.client().clone();
        within_or(
            PAGE_LIMIT,
            || {
                let (client, script) = (client.clone(), script.clone());
                async move { (client.execute(&script, vec![]).await.ok()? == json!(true)).then_some(()) }
            },
            || format!("waiting until {what} (`{condition}`)"),
        )
        .await;
    }

    /// Clicks the element matching `css` once it is there. Live pages re-render: an element replaced between
    /// finding and clicking it is found again.
    pub async fn click(&self, css: &str) {
        let client = self.client().clone();
        within_or(
            PAGE_LIMIT,
            || {
                let client = client.clone();
                async move {
                    match client.find(Locator::Css(css)).await.ok()?.click().await {
                        Ok(()) => Some(()),
                        Err(e) if e.to_string().contains("stale element") => None,
                        Err(e) => panic!("clicking `{css}`: {e}"),
                    }
                }
            },
            || format!("waiting to click `{css}`"),
        )
        .await;
    }

    /// The text of the element matching `css`, once it is there (found again if a re-render replaced it).
    pub async fn text_of(&self, css: &str) -> String {
        let client = self.client().clone();
        within_or(
            PAGE_LIMIT,
            || {
                let client = client.clone();
                async move { client.find(Locator::Css(css)).await.ok()?.text().await.ok() }
            },
            || format!("waiting for the text of `{css}`"),
        )
        .await
    }

    /// Types `text` into the input matching `css`, again until the input holds it: a live page may re-render
    /// while keys arrive.
    pub async fn type_into(&self, css: &str, text: &str) {
        let client = self.client().clone();
        within_or(
            PAGE_LIMIT,
            || {
                let client = client.clone();
                async move {
                    let input = client.find(Locator::Css(css)).await.ok()?;
                    input.clear().await.ok()?;
                    input.send_keys(text).await.ok()?;
                    (input.prop("value").await.ok()?? == text).then_some(())
                }
            },
            || format!("waiting to type into `{css}`"),
        )
        .await;
    }

    /// Runs `script` (a function body) in the page and returns its value.
    pub async fn script(&self, script: &str) -> Value {
        self.client().execute(script, vec![]).await.unwrap_or_else(|e| panic!("running `{script}`: {e}"))
    }

    /// Saves a screenshot of the window as `target/ui-screenshots/NAME.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client().screenshot().await.expect("a screenshot");
        std::fs::write(screenshot_dir().join(format!("{name}.png")), png).expect("the screenshot is saved");
    }

    /// Ends the browser session.
    pub async fn close(self) {
        self.browser.close().await;
    }
}
