use super::*;

#[test]
fn a_provisioned_script_user_is_named_with_both_parameters() {
    let url =
        ResourceUrl::parse("redis://gw:pw@h:1/2?scriptUserName=scr&scriptPassword=s3cret").unwrap();
    let script = url.script_auth.expect("a script user");
    assert_eq!(script.username.as_deref(), Some("scr"));
    assert_eq!(script.password, "s3cret");
    for url in [
        "redis-cluster://gw:pw@h:1?scriptUserName=scr&scriptPassword=x",
        "redis-sentinel://h:1/m?scriptUserName=scr&scriptPassword=x",
    ] {
        assert!(
            ResourceUrl::parse(url).unwrap().script_auth.is_some(),
            "{url}"
        );
    }
    assert_eq!(
        ResourceUrl::parse("redis://h:1?scriptUserName=scr").unwrap_err(),
        ResourceUrlError::BadParameter("scriptPassword".into())
    );
    assert!(
        ResourceUrl::parse("redis://h:1")
            .unwrap()
            .script_auth
            .is_none()
    );
}

#[test]
fn a_resource_names_the_default_scripts_policy_of_its_tenants() {
    for (url, scripts) in [
        (
            "redis://h:1/2?scripts=read_only",
            Some(ScriptsPolicy::ReadOnly),
        ),
        (
            "redis-cluster://h:1?scripts=deny",
            Some(ScriptsPolicy::Deny),
        ),
        (
            "redis-sentinel://h:1/m?scripts=allow",
            Some(ScriptsPolicy::Allow),
        ),
        ("redis://h:1", None),
    ] {
        assert_eq!(ResourceUrl::parse(url).unwrap().scripts, scripts, "{url}");
    }
    assert_eq!(
        ResourceUrl::parse("redis://h:1?scripts=maybe").unwrap_err(),
        ResourceUrlError::BadParameter("scripts".into())
    );
}

fn standalone(url: &str) -> (Node, u32, Option<Credentials>) {
    match ResourceUrl::parse(url) {
        Ok(ResourceUrl {
            kind: ResourceKind::Standalone { node, db },
            auth,
            ..
        }) => (node, db, auth),
        other => panic!("{url}: {other:?}"),
    }
}

fn node(host: &str, port: u16) -> Node {
    Node {
        host: host.to_string(),
        port,
    }
}

fn password(p: &str) -> Option<Credentials> {
    Some(Credentials {
        username: None,
        password: p.to_string(),
    })
}

#[test]
fn common_and_camellia_forms_agree() {
    let expected = (node("127.0.0.1", 6379), 1, password("secret"));
    assert_eq!(standalone("redis://:secret@127.0.0.1:6379/1"), expected);
    assert_eq!(standalone("redis://secret@127.0.0.1:6379?db=1"), expected);
    assert_eq!(
        standalone("redis://@127.0.0.1:6379?db=1"),
        (node("127.0.0.1", 6379), 1, None)
    );
    assert_eq!(standalone("redis://h"), (node("h", 6379), 0, None));
}

#[test]
fn acl_user_and_at_sign_in_password() {
    let (_, _, auth) = standalone("redis://app:p@ss@[::1]:7000");
    assert_eq!(
        auth,
        Some(Credentials {
            username: Some("app".to_string()),
            password: "p@ss".to_string()
        })
    );
    assert_eq!(standalone("redis://[::1]:7000").0, node("::1", 7000));
}

#[test]
fn sentinel_and_cluster() {
    let url = ResourceUrl::parse(
        "redis-sentinel-slaves://pw@s1:26379,s2/mymaster?withMaster=true&db=2&sentinelPassword=sp",
    )
    .unwrap();
    assert!(url.read_only());
    match url.kind {
        ResourceKind::Sentinel {
            sentinels,
            master_name,
            db,
            sentinel_auth,
            replicas,
            ..
        } => {
            assert_eq!(sentinels, vec![node("s1", 26379), node("s2", 26379)]);
            assert_eq!(master_name, "mymaster");
            assert_eq!(db, 2);
            assert_eq!(sentinel_auth, password("sp"));
            assert_eq!(replicas, Some(ReplicaMode { with_master: true }));
        }
        other => panic!("{other:?}"),
    }
    let cluster = ResourceUrl::parse("redis-cluster://@a:7000,b:7001").unwrap();
    assert!(!cluster.read_only());
    assert_eq!(
        cluster.kind,
        ResourceKind::Cluster {
            seeds: vec![node("a", 7000), node("b", 7001)],
            replicas: None
        }
    );
}

#[test]
fn tls_schemes_and_options() {
    let plain = ResourceUrl::parse("redis://h:1").unwrap();
    assert_eq!(plain.tls, None);
    let default = ResourceUrl::parse("rediss://pw@h:1/2").unwrap();
    assert_eq!(default.tls, Some(TlsOptions::default()));
    let url = ResourceUrl::parse(
        "rediss-cluster://pw@a:1,b:2?tlsCaFile=/ca.pem&tlsCertFile=/c.pem&tlsKeyFile=/c.key&tlsServerName=redis.internal&tlsVerify=ca",
    )
    .unwrap();
    assert_eq!(
        url.tls,
        Some(TlsOptions {
            ca_file: Some("/ca.pem".into()),
            client_cert: Some(("/c.pem".into(), "/c.key".into())),
            server_name: Some("redis.internal".into()),
            verify: TlsVerify::Ca,
        })
    );
    // camellia's sentinelSSL: TLS to the sentinels, independently of the data nodes'.
    let sentinels_only =
        ResourceUrl::parse("redis-sentinel://s:1/m?sentinelSSL=true&tlsVerify=none").unwrap();
    assert_eq!(sentinels_only.tls, None);
    match sentinels_only.kind {
        ResourceKind::Sentinel { sentinel_tls, .. } => assert_eq!(
            sentinel_tls,
            Some(TlsOptions {
                verify: TlsVerify::None,
                ..TlsOptions::default()
            })
        ),
        other => panic!("{other:?}"),
    }
    match ResourceUrl::parse("rediss-sentinel://s:1/m").unwrap().kind {
        ResourceKind::Sentinel { sentinel_tls, .. } => assert_eq!(sentinel_tls, None),
        other => panic!("{other:?}"),
    }
    let err = |url| ResourceUrl::parse(url).unwrap_err().to_string();
    assert_eq!(
        err("redis://h:1?tlsCaFile=/ca.pem"),
        "TLS parameters need TLS: a rediss:// scheme (or sentinelSSL=true for the sentinels)"
    );
    assert_eq!(
        err("rediss://h:1?tlsVerify=off"),
        "tlsVerify must be full, ca or none, not 'off'"
    );
    assert_eq!(
        err("rediss://h:1?tlsCertFile=/c.pem"),
        "unsupported or malformed parameter 'tlsKeyFile'"
    );
    assert_eq!(
        err("rediss://h:1?sentinelSSL=true"),
        "unsupported or malformed parameter 'sentinelSSL'"
    );
}

#[test]
fn rejects_with_clear_reasons() {
    let err = |url| ResourceUrl::parse(url).unwrap_err().to_string();
    assert_eq!(
        err("127.0.0.1:6379"),
        "missing scheme (expected redis://, redis-sentinel://, redis-cluster://, ...)"
    );
    assert_eq!(err("http://h:1"), "unknown scheme 'http://'");
    assert_eq!(
        err("redis://h:99999"),
        "bad host 'h:99999' (expected host:port)"
    );
    assert_eq!(
        err("redis://a:1,b:2"),
        "a redis:// resource names exactly one host:port"
    );
    assert_eq!(err("redis://h:1/x"), "bad db 'x'");
    assert_eq!(
        err("redis-sentinel://h:1"),
        "a sentinel URL needs the master name as its path: redis-sentinel://host:port/masterName"
    );
    assert_eq!(
        err("redis://h:1?foo=1"),
        "unsupported or malformed parameter 'foo'"
    );
    assert_eq!(
        err("redis-cluster://h:1/3"),
        "a Redis Cluster has only db 0"
    );
    // The password never shows in an error.
    assert!(!err("redis://topsecret@h:x").contains("topsecret"));
}
