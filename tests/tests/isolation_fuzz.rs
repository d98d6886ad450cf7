//! The hostile isolation fuzzer (`switchyard_tests::fuzz`): at least 20,000 cases drawn for every
//! command of the backend's command table, sent as tenants by database and by key namespace, each checked on the
//! backend itself. The run ends with the fuzzer's report; any failure it lists fails the test, with a `redis-cli`
//! snippet, the seed and the case number to replay it. `SWITCHYARD_FUZZ_SEED`, `SWITCHYARD_FUZZ_CASES` and
//! `SWITCHYARD_FUZZ_FIRST` choose other cases (`scripts/fuzz-isolation` sets them).

use switchyard_tests::fuzz::{FuzzConfig, run};

#[test]
fn no_case_reaches_another_tenant_or_the_shared_redis() {
    let config = FuzzConfig::from_env(20_000);
    let report = run(&config).expect("the fuzzer's platform");
    println!("{report}");
    assert!(report.passed(), "{report}");
}
