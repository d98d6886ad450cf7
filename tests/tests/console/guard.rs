//! The route page's guard: a change that would leave keys where they are no longer found is refused with the
//! share they are, saved once forced; a rollback that would do the same asks first.

use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_tests::ControlPlane;

use crate::browser::Browser;
use crate::save_route;

/// acme's route is version 4, `main`, with its keys there; it ends at version 6, `main` again.
pub(crate) async fn refuse_and_force(browser: &Browser, cp: &ControlPlane) {
    // The route guard: sending acme's keys' lookups to spare by hand is refused with the share they are; forced,
    // it is saved; rolling back to main would strand them again, and asks first.
    browser.open("#/tenants/acme/route").await;
    browser.on_page("route").await;
    save_route(
        browser,
        r#"{"type": "single", "target": "spare"}"#,
        "by hand",
    )
    .await;
    browser
        .wait_for(
            "the guard's refusal",
            "document.getElementById('notice').textContent.includes(\"Not saved: 100.0% of the tenant's keys would no longer be found\") && [...document.querySelectorAll('#route-errors li')].some(li => li.textContent.includes('100.0% of the keys: main -> spare'))",
        )
        .await;
    assert_eq!(
        cp.expect("GET", "/v1/tenants/acme/route", None, 200).await["version"],
        4
    );
    browser.click("#route-force").await;
    browser.click("#save-route").await;
    browser
        .wait_for(
            "version 5, forced",
            "document.querySelector('#route-view h2').textContent === 'Version 5' && document.getElementById('notice').textContent.includes('100.0% of the keys are no longer found (exact)')",
        )
        .await;
    browser.open("#/tenants/acme/history").await;
    browser.on_page("history").await;
    browser
        .click("#versions tr[data-version='4'] .rollback")
        .await;
    browser
        .client
        .accept_alert()
        .await
        .expect("the rollback prompt");
    let deadline = Instant::now() + Duration::from_secs(5);
    while browser.client.accept_alert().await.is_err() {
        assert!(
            Instant::now() < deadline,
            "no confirmation of a rollback that moves keys"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    browser
        .wait_for(
            "version 6",
            "document.querySelector('#versions tbody tr').dataset.version === '6'",
        )
        .await;
    let current = cp.expect("GET", "/v1/tenants/acme/route", None, 200).await;
    assert_eq!(
        current["route"],
        json!({"type": "single", "target": "main"})
    );
}
