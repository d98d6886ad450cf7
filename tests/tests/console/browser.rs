//! A headless Chromium driven over WebDriver: chromedriver on an allocated port (its own process group, killed
//! with the browsers it started), a fantoccini session, and the waits and checks the console tests share.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use switchyard_tests::allocate_port;

/// How long any one thing the page should do may take.
const PATIENCE: Duration = Duration::from_secs(20);

pub(crate) struct Browser {
    pub(crate) client: Client,
    origin: String,
    _driver: Guard,
}

impl Browser {
    /// Starts chromedriver and a browser session for pages of `origin` (`http://127.0.0.1:PORT`).
    pub(crate) async fn start(origin: &str) -> Browser {
        let port = allocate_port();
        let profile =
            std::env::temp_dir().join(format!("switchyard-chromium-{}-{port}", std::process::id()));
        let log =
            std::fs::File::create(std::env::temp_dir().join(format!("chromedriver-{port}.log")))
                .expect("chromedriver log");
        let mut command = Command::new("chromedriver");
        command
            .arg(format!("--port={port}"))
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log));
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let driver = command
            .spawn()
            .expect("chromedriver (Debian: apt-get install chromium chromium-driver)");
        let guard = Guard {
            driver,
            profile: profile.clone(),
        };
        let deadline = Instant::now() + PATIENCE;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({"args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1440,1000", "--force-device-scale-factor=1", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                format!("--user-data-dir={}", profile.display()),
            ]}),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session");
        Browser {
            client,
            origin: origin.to_string(),
            _driver: guard,
        }
    }

    /// Opens the console at `fragment` (`#/tenants`).
    pub(crate) async fn open(&self, fragment: &str) {
        self.client
            .goto(&format!("{}/console/{fragment}", self.origin))
            .await
            .expect("navigate");
    }

    pub(crate) async fn find(&self, css: &str) -> Element {
        self.client
            .wait()
            .at_most(PATIENCE)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    pub(crate) async fn click(&self, css: &str) {
        self.find(css).await.click().await.expect("click");
    }

    /// Clicks `css` and accepts the confirmation it opens (`what` it confirms).
    pub(crate) async fn click_and_confirm(&self, css: &str, what: &str) {
        self.click(css).await;
        self.client
            .accept_alert()
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }

    /// Waits until the message line reports a success (`what` succeeded).
    pub(crate) async fn notice_ok(&self, what: &str) {
        self.wait_for(what, "document.getElementById('notice').className === 'ok'")
            .await;
    }

    /// Replaces an input's text, as typing it would.
    pub(crate) async fn fill(&self, css: &str, text: &str) {
        let input = self.find(css).await;
        input.clear().await.expect("clear");
        input.send_keys(text).await.expect("type");
    }

    /// Sets a textarea's whole value at once (typing a document key by key is slow), then tells the page.
    pub(crate) async fn set_value(&self, css: &str, text: &str) {
        self.find(css).await;
        self.js(
            "const el = document.querySelector(arguments[0]); el.value = arguments[1]; \
             el.dispatchEvent(new Event('input', {bubbles: true})); return true;",
            vec![json!(css), json!(text)],
        )
        .await;
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.expect("text")
    }

    pub(crate) async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.expect("script")
    }

    /// Waits until the JavaScript expression `condition` holds; panics with `what` and the page's notice line.
    pub(crate) async fn wait_for(&self, what: &str, condition: &str) {
        self.wait_for_within(what, condition, PATIENCE).await;
    }

    /// [`Browser::wait_for`], for at most `patience`.
    pub(crate) async fn wait_for_within(&self, what: &str, condition: &str, patience: Duration) {
        // An element the condition reads may be between two renders: not there yet is "not yet".
        let script =
            format!("try {{ return Boolean({condition}); }} catch (e) {{ return false; }}");
        let deadline = Instant::now() + patience;
        while self.js(&script, vec![]).await != json!(true) {
            if Instant::now() > deadline {
                let notice = self
                    .js(
                        "return document.getElementById('notice').textContent",
                        vec![],
                    )
                    .await;
                self.screenshot(&format!("failed-{}", what.replace(' ', "-")))
                    .await;
                panic!("timed out waiting for {what} ({condition}); notice: {notice}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the page named `page` (`body[data-page]`) has drawn what it first fetched (`body[data-ready]`).
    pub(crate) async fn on_page(&self, page: &str) {
        self.wait_for(
            &format!("page {page}"),
            &format!(
                "document.body.dataset.page === '{page}' && document.body.dataset.ready === 'true'"
            ),
        )
        .await;
    }

    /// Saves a PNG of the window as target/console-screenshots/NAME.png.
    pub(crate) async fn screenshot(&self, name: &str) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/console-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot directory");
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }

    /// Every URL the page has fetched (documents, scripts, styles, API calls) is of the console's origin, and the
    /// page holds no inline script or style for the policy to have blocked.
    pub(crate) async fn assert_same_origin_only(&self) {
        let loaded = self
            .js(
                "return performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource')).map(e => e.name)",
                vec![],
            )
            .await;
        let loaded = loaded.as_array().expect("a list of URLs");
        assert!(!loaded.is_empty());
        for url in loaded {
            let url = url.as_str().unwrap_or_default();
            assert!(
                url.starts_with(&format!("{}/", self.origin)),
                "{url} is not of {}",
                self.origin
            );
        }
        let inline = self
            .js(
                "return document.querySelectorAll('script:not([src]), style, [style], [onclick], [onload]').length",
                vec![],
            )
            .await;
        assert_eq!(inline, json!(0), "inline script or style in the page");
    }

    /// Ends the session (the browser quits); dropping the `Browser` then stops chromedriver.
    pub(crate) async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

/// Kills chromedriver's process group (it and the browsers it started) and removes the browser's profile.
struct Guard {
    driver: Child,
    profile: PathBuf,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
